"""Shared fixtures: isolated undercloud homes, a running service, and skip helpers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO.parent / "shared").resolve()  # as the engine names files: a symlinked ../shared too
CORPUS = SHARED / "corpus" / "heat-templates"


@pytest.fixture
def uc_home(tmp_path, monkeypatch):
    """An isolated UNDERCLOUD_HOME; its service (if one was started) is stopped after."""
    from undercloud import daemon
    from undercloud.config import Home

    home = tmp_path / "uc"
    monkeypatch.setenv("UNDERCLOUD_HOME", str(home))
    monkeypatch.delenv("UNDERCLOUD_DB", raising=False)
    yield Home(home)
    daemon.stop(Home(home))


def run_cli(*args: str, input: str | None = None, env: dict | None = None, timeout: float = 120):
    """Run the real `undercloud` command in a subprocess; returns CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
        input=input, env={**os.environ, **(env or {})}, timeout=timeout,
    )


def need(tool: str) -> None:
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed")


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
