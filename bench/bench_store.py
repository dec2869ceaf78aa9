"""The store a benchmark runs on: `--db sqlite` (default: a file in the run's temporary
directory), `--db postgresql` (a throwaway local server, as the tests start it: needs root and
Debian's postgresql), or any store URL."""

from __future__ import annotations

import contextlib
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
