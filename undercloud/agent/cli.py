"""Command line of the agent (argparse, standard library only)."""

from __future__ import annotations

import argparse

from undercloud import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m undercloud.agent",
        description="Undercloud node agent: collect metadata, apply it, run deployments, signal results.",
    )
    parser.add_argument("--version", action="version", version=f"undercloud-agent {__version__}")
    parser.parse_args(argv)
    return 0
