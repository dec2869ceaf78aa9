"""podman as this project uses it: runc as runtime and explicit ulimits.

crun fails on hosts with hybrid cgroups and the default nofile limit cannot be raised on
every host (see ../shared/ENVIRONMENT.md), so every podman call gets CONTAINERS_CONF
pointing at the file below.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from undercloud.host.run import require, run

CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""
CONF_PATH = Path("/tmp/undercloud-containers.conf")


def env() -> dict:
    """The environment for podman (and `podman kube play`) calls."""
    if not CONF_PATH.exists() or CONF_PATH.read_text() != CONF:
        tmp = CONF_PATH.with_suffix(f".{os.getpid()}")
        tmp.write_text(CONF)
        tmp.replace(CONF_PATH)
    return dict(os.environ, CONTAINERS_CONF=str(CONF_PATH))


def podman(*args: str, check: bool = True, input: str | bytes | None = None,
           timeout: float | None = 300, text: bool = True) -> subprocess.CompletedProcess:
    require("podman", "podman")
    return run(["podman", *args], check=check, input=input, timeout=timeout, env=env(), text=text)


def available() -> str | None:
    """None when podman works here, else the reason it does not (for skips and errors)."""
    try:
        podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=30)
    except Exception as exc:  # noqa: BLE001 - any failure is a reason
        return str(exc)
    return None


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def argv(*args: str) -> Sequence[str]:
    return ["podman", *args]
