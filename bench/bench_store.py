"""What benchmarks share: the store a benchmark runs on (`--db sqlite`, the default: a file in
the run's temporary directory; `--db postgresql`: a throwaway local server, as the tests start
it: needs root and Debian's postgresql; or any store URL), and a baseline copy of the package
to compare with in the same run."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HELP = "sqlite (default), postgresql (a throwaway local server; root), or a store URL"


@contextlib.contextmanager
def store_url(db: str, tmp: Path) -> Iterator[str]:
    if db == "sqlite":
        yield f"sqlite:///{tmp / 'bench.db'}"
    elif db == "postgresql":
        sys.path.insert(0, str(REPO))
        from tests import pg_support

        reason = pg_support.why_not()
        if reason:
            raise SystemExit(f"--db postgresql: {reason}")
        server = pg_support.Server(Path("/tmp"))
        try:
            yield server.new_database()
        finally:
            server.stop()
    else:
        yield db


def baseline_tree(ref: str, into: Path, sub: str = "undercloud/orchestration/template") -> Path:
    """A copy of this checkout's package with `sub` as git commit `ref` has it (nothing in git
    changes): a baseline to time beside this checkout, interleaved, on the same machine load."""
    shutil.copytree(REPO / "undercloud", into / "undercloud", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(into / sub)
    tar = subprocess.run(["git", "-C", str(REPO), "archive", ref, sub], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into
