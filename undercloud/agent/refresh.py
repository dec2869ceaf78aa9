"""os-refresh-config: run the phase directories with dib-run-parts semantics.

Phases in order: pre-configure.d, configure.d, post-configure.d, migration.d. In each,
the executable regular files whose names match ^[0-9A-Za-z_-]+$ run in numeric-then-
name order; the first failure stops the run, `error.d` runs, and the refresh fails.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

PHASES = ["pre-configure", "configure", "post-configure", "migration"]
ALLOWED = re.compile(r"^[0-9A-Za-z_-]+$")


class RefreshError(Exception):
    pass


def _order(name: str) -> tuple:
    m = re.match(r"\d+", name)
    return (int(m.group()) if m else 0, name)


def parts(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir()
             if ALLOWED.match(p.name) and p.is_file() and os.access(p, os.X_OK)]
    return sorted(found, key=lambda p: _order(p.name))


def run_parts(directory: Path, env: dict | None = None, timeout: float | None = None,
              log: Callable[[str], None] = lambda _m: None) -> None:
    for part in parts(directory):
        log(f"running {part}")
        try:
            p = subprocess.run([str(part)], env=env, timeout=timeout, capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            raise RefreshError(f"{part} ran past {timeout:.0f} s") from None
        except OSError as exc:
            raise RefreshError(f"{part}: {exc.strerror}") from None
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip()[-400:]
            raise RefreshError(f"{part} exited with {p.returncode}" + (f": {tail}" if tail else ""))


def refresh(base: Path, env: dict | None = None, timeout: float | None = None,
            log: Callable[[str], None] = lambda _m: None) -> None:
    """Run every phase; on failure run error.d and raise RefreshError naming the phase."""
    for phase in PHASES:
        try:
            run_parts(base / f"{phase}.d", env, timeout, log)
        except RefreshError as exc:
            try:
                run_parts(base / "error.d", env, timeout, log)
            except RefreshError as err:
                log(f"error.d failed too: {err}")
            raise RefreshError(f"{phase} phase: {exc}") from None
