"""A throwaway PostgreSQL server for a test run (UNDERCLOUD_TEST_STORE=postgresql).

Debian's server binaries, a cluster of its own in a temporary directory, listening on
127.0.0.1 only, owned by the `postgres` user (the server refuses to run as root), trusting
local connections, without fsync (a test store is thrown away). Each test gets a new database:
a copy of one the migrations made once (CREATE DATABASE ... TEMPLATE, a fraction of a second
where running them takes one or more), or an empty one for the tests of the migrations.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import free_port

BIN_GLOB = "/usr/lib/postgresql/*/bin"
_names = itertools.count()


def bin_dir() -> Path | None:
    found = sorted(glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name))
    return Path(found[-1]) if found and Path(found[-1], "pg_ctl").exists() else None


def why_not() -> str | None:
    """Why this machine cannot run the server, or None."""
    if bin_dir() is None:
        return "PostgreSQL's server is not installed (Debian package postgresql)"
    if os.geteuid() != 0:
        return "starting a PostgreSQL server as the postgres user needs root"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed"
    return None


class Server:
    """`listen`: the addresses it listens on (127.0.0.1; a lab network's host address for
    nodes, where `hba` lines let them in, e.g. with a password)."""

    def __init__(self, root: Path, listen: tuple[str, ...] = ("127.0.0.1",), hba: tuple[str, ...] = ()):
        self.root = Path(tempfile.mkdtemp(prefix="pg-", dir=root))
        self.data = self.root / "data"
        self.port = free_port()
        self._migrated: str | None = None
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                          "-E", "UTF8", "--no-sync")
        if hba:
            with open(self.data / "pg_hba.conf", "a") as f:
                f.write("".join(f"{line}\n" for line in hba))
        options = (f"-h {','.join(listen)} -p {self.port} -k {self.root} -c fsync=off -c synchronous_commit=off"
                   " -c full_page_writes=off -c max_connections=400")
        self._as_postgres("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                          "-o", options, "start")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        # Stopped with this process however it ends (a killed test run too), not left running.
        subprocess.Popen(
            ["sh", "-c", f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
             f"runuser -u postgres -- {bin_dir() / 'pg_ctl'} -D {self.data} -m immediate -w stop; "
             f"rm -rf {self.root}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, cwd="/")

    def _as_postgres(self, tool: str, *args: str) -> None:
        r = subprocess.run(["runuser", "-u", "postgres", "--", str(bin_dir() / tool), *args],
                           capture_output=True, text=True, timeout=120, cwd="/")
        if r.returncode:
            raise RuntimeError(f"{tool}: {r.stderr.strip() or r.stdout.strip()}")

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(sql)

    def new_database(self, migrated: bool = True) -> str:
        """A new database: a copy of the migrated template (as a store is after its first
        open, before it writes its key check), or with `migrated=False` an empty one."""
        name = f"t{os.getpid()}_{next(_names)}"
        self._admin(f"CREATE DATABASE {name}" + (f" TEMPLATE {self._template()}" if migrated else ""))
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def _template(self) -> str:
        """The template, made once: the schema at the migrations' head, without the key-check
        value (encrypted with a key of its own; a store's first open writes one with the
        test's key, store/migrate._check_key), and no connection left to it (copies need none)."""
        if self._migrated is None:
            from sqlalchemy import delete

            from undercloud.store import Store
            from undercloud.store.meta import KEY_CHECK, StoreMeta

            name = f"t{os.getpid()}_migrated"
            self._admin(f"CREATE DATABASE {name}")
            with tempfile.TemporaryDirectory() as d:
                store = Store(self.url.rsplit("/", 1)[0] + f"/{name}", Path(d) / "store.key").create_schema()
                with store.session() as s:
                    s.execute(delete(StoreMeta).where(StoreMeta.key == KEY_CHECK))
                store.engine.dispose()
            self._migrated = name
        return self._migrated

    def drop_database(self, url: str) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def stop(self) -> None:
        try:
            self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
