"""Command line of the agent (argparse, standard library only)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from undercloud import __version__
from undercloud.agent.settings import DEFAULT_CONFIG, Settings, SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m undercloud.agent",
        description="Undercloud node agent: polls this server's metadata from the undercloud, "
                    "applies it (os-apply-config templates, os-refresh-config phases) and runs its "
                    "software deployments through hooks (script, apply-config, json-file, kube), "
                    "signalling each result back.",
    )
    parser.add_argument("--version", action="version", version=f"undercloud-agent {__version__}")
    sub = parser.add_subparsers(dest="cmd")
    run = sub.add_parser("run", help="Poll and apply until stopped (the node's service).")
    run.add_argument("--config", type=Path, default=Path(os.environ.get("UNDERCLOUD_AGENT_CONFIG", DEFAULT_CONFIG)),
                     help="Agent configuration JSON (url, server_id, token, state_dir, ...). "
                          "Default: $UNDERCLOUD_AGENT_CONFIG or %(default)s.")
    run.add_argument("--once", action="store_true", help="One collect/apply/deploy round, then exit.")
    hook = sub.add_parser("hook", help="Run one built-in hook: deployment JSON on stdin, result JSON on stdout.")
    hook.add_argument("group", help="script, apply-config, json-file or kube")
    sv = sub.add_parser("supervise", help="(internal) run a Pod's containers as supervised processes.")
    sv.add_argument("spec", type=Path)
    pf = sub.add_parser("prefetch-images", help="(internal) load the images later deploy steps need.")
    pf.add_argument("spec", type=Path)
    ac = sub.add_parser("apply-config", help="Render an os-apply-config template tree (like os-apply-config).")
    ac.add_argument("-t", "--templates", type=Path, required=True, help="Template root (mirrors /).")
    ac.add_argument("-o", "--output", type=Path, default=Path("/"), help="Output root (default /).")
    ac.add_argument("-m", "--metadata", type=Path, nargs="+", required=True,
                    help="Metadata JSON files, deep-merged in order (later wins).")
    rc = sub.add_parser("refresh-config", help="Run os-refresh-config phases from a base directory.")
    rc.add_argument("--base", type=Path, required=True, help="Directory holding pre-configure.d, configure.d, ...")
    args = parser.parse_args(argv)

    if args.cmd == "hook":
        from undercloud.agent.hooks import hook_main
        return hook_main(args.group)
    if args.cmd == "supervise":
        from undercloud.agent.processes import supervise
        return supervise(args.spec)
    if args.cmd == "prefetch-images":
        from undercloud.agent.kube import engine_for
        from undercloud.agent.pod_images import prefetch
        return prefetch(args.spec, engine_for)
    if args.cmd == "apply-config":
        from undercloud.agent import apply as oac
        try:
            sources = [json.loads(p.read_text()) for p in args.metadata]
            for w in oac.apply_config(args.templates, args.output, oac.merge_sources(sources)):
                print(f"wrote {w}", file=sys.stderr)
        except (OSError, ValueError, oac.ApplyError) as exc:
            print(f"apply-config: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "refresh-config":
        from undercloud.agent.refresh import RefreshError, refresh
        try:
            refresh(args.base, log=lambda m: print(m, file=sys.stderr))
        except RefreshError as exc:
            print(f"refresh-config: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "run":
        from undercloud.agent.runner import Agent
        try:
            settings = Settings.load(args.config)
        except SettingsError as exc:
            print(f"undercloud-agent: {exc}", file=sys.stderr)
            return 2
        agent = Agent(settings)
        if args.once:
            return 0 if agent.cycle() else 1
        agent.start_watchdog()
        try:
            agent.run_forever()
        except KeyboardInterrupt:
            pass
        return 0
    parser.print_help()
    return 0
