"""Run a host command; a failure becomes one clear line naming the command and its error."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Sequence

from undercloud.errors import UndercloudError


class CommandFailed(UndercloudError):
    def __init__(self, argv: Sequence[str], code: int, stderr: str):
        tail = (stderr or "").strip().splitlines()[-1:] or ["no error output"]
        super().__init__(f"`{' '.join(argv[:3])}{' ...' if len(argv) > 3 else ''}` failed (exit {code}): {tail[0]}")
        self.argv, self.code, self.stderr = list(argv), code, stderr


def require(tool: str, package: str | None = None) -> str:
    path = shutil.which(tool)
    if not path:
        hint = f" (apt-get install {package})" if package else ""
        raise UndercloudError(f"{tool} is not installed{hint}")
    return path


def run(argv: Sequence[str], *, check: bool = True, input: str | bytes | None = None,
        timeout: float | None = None, env: dict | None = None, text: bool = True,
        cwd: str | None = None) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(argv), capture_output=True, input=input, timeout=timeout,
                              env=env, text=text, cwd=cwd)
    except FileNotFoundError:
        raise UndercloudError(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise UndercloudError(f"`{' '.join(argv[:3])}` did not finish within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise CommandFailed(argv, proc.returncode, err)
    return proc


def route_source(host: str | None) -> str | None:
    """This host's source address on its route to `host`, an IPv4 address or a name (the
    kernel's route choice: a UDP connect, which sends nothing). None for no host or a Unix
    socket's directory (a store URL's host may be either); a loopback host gives its loopback
    address. No route, or a name that does not resolve, raises UndercloudError."""
    if not host or host.startswith("/"):
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return s.getsockname()[0]
    except OSError as exc:
        raise UndercloudError(f"no route from this host to {host}: {exc.strerror or exc}") from None
