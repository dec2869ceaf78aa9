"""Where an undercloud instance keeps its state. `UNDERCLOUD_HOME` moves all of it.

The home is private (0700): it holds the store, its key, the admin token, the service log
and first-boot data. Files that carry secrets are made owner-only from the start
(`private_file`), and `secure()` puts the modes back at every service start. Files are
written whole or not at all by the one helper for it, `undercloud.agent.files.write_atomic`
(in the agent's package, which every layer may import).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.errors import UndercloudError

# Files of a home that carry secrets or point at them: owner-only (store.key is the store's).
PRIVATE_FILES = ("undercloud.db", "undercloud.db-wal", "undercloud.db-shm", "store.key", "admin.token",
                 "service.log")


def host_name() -> str:
    """The name this host goes by among the workers of a store and as a hypervisor host:
    UNDERCLOUD_HOST (as Nova's and Ironic's `host` option), else the hostname."""
    return os.environ.get("UNDERCLOUD_HOST") or socket.gethostname() or "localhost"


@dataclass(frozen=True)
class Home:
    path: Path

    @classmethod
    def current(cls) -> Home:
        env = os.environ.get("UNDERCLOUD_HOME")
        path = Path(env) if env else Path.home() / ".local" / "share" / "undercloud"
        return cls(path.resolve())

    def ensure(self) -> Home:
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise UndercloudError(f"cannot make the undercloud home: {exc.strerror}", str(self.path)) from None
        return self

    def secure(self) -> list[str]:
        """Home 0700 and its secret files 0600 (a home made by an older version was 0755 with
        0644 files); returns what was changed."""
        fixed = []
        for path, mode in ((self.path, 0o700), *((self.file(n), 0o600) for n in PRIVATE_FILES)):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if st.st_uid == os.getuid() and st.st_mode & 0o777 != mode:
                path.chmod(mode)
                fixed.append(path.name or str(path))
        return fixed

    @property
    def instance(self) -> str:
        """A short name unique to this home, carried by everything made on the host."""
        return "uc" + hashlib.sha256(str(self.path).encode()).hexdigest()[:6]

    @property
    def db_url(self) -> str:
        return os.environ.get("UNDERCLOUD_DB") or f"sqlite:///{self.path / 'undercloud.db'}"

    def file(self, name: str) -> Path:
        return self.path / name

    def store_key_file(self) -> Path:
        """The store's key: `<home>/store.key`, or the file UNDERCLOUD_STORE_KEY names (a store
        shared by several homes, e.g. PostgreSQL, needs the same key in each)."""
        env = os.environ.get("UNDERCLOUD_STORE_KEY")
        return Path(env) if env else self.file("store.key")

    def made_once(self, name: str, text: str) -> str:
        """The content of file `name`, made (mode 600) with `text` if missing: complete or
        not at all, and of two racing creators one wins whole (a reader never sees it empty)."""
        path = self.file(name)
        if not path.exists():
            self.ensure()
            write_once(path, text.encode())
        return path.read_text().strip()

    def admin_token(self) -> str:
        """The token the CLI presents; created once, readable by the owner only. It is kept in
        clear because the CLI must present it; the service only compares it."""
        return self.made_once("admin.token", secrets.token_urlsafe(32))

    def worker_id(self) -> str:
        """This home's name among the workers sharing a store: made once (host + random), so a
        restarted service is the same worker and resumes its own operations at once."""
        host = re.sub(r"[^A-Za-z0-9.-]", "-", host_name())[:40] or "host"
        return self.made_once("worker.id", f"{host}-{secrets.token_hex(4)}")

    @property
    def tls_dir(self) -> Path:
        """The undercloud's CA and the service's certificate (undercloud/tls.py)."""
        return self.file("tls")

    @property
    def ca_file(self) -> Path:
        """The CA certificate clients verify the service with (tls.CA_CERT)."""
        return self.tls_dir / "ca.pem"

    def api_port(self) -> int:
        """The API port: chosen free at the first start, then kept (nodes hold the address)."""
        path = self.file("port")
        if path.exists():
            return int(path.read_text().strip())
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return int(self.made_once("port", str(port)))


_CONTEXTS: dict[tuple[str, int], object] = {}


def client_context(ca_file: Path | str):
    """A client's TLS context trusting only the CA in `ca_file` (host names checked), made once
    per CA file as it is now; None while there is no such file (the service makes it)."""
    try:
        key = (str(ca_file), os.stat(ca_file).st_mtime_ns)
    except FileNotFoundError:
        return None
    if key not in _CONTEXTS:
        import ssl  # here: `--help` and the commands that make no request need no TLS

        _CONTEXTS[key] = ssl.create_default_context(cafile=str(ca_file))
    return _CONTEXTS[key]


def connection(url: str, ca_file: Path | str, timeout: float):
    """An HTTP connection to the service at `url` (scheme://host:port): over TLS verified by
    the CA in `ca_file` for https (ServiceUnavailable while there is no such file), plain for
    http (a worker or an agent configured before TLS)."""
    import http.client
    from urllib.parse import urlsplit

    where = urlsplit(url)
    if where.scheme != "https":
        return http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port or 80, timeout=timeout)
    context = client_context(ca_file)
    if context is None:
        from undercloud.errors import ServiceUnavailable

        raise ServiceUnavailable(f"the undercloud service has no certificate yet ({ca_file} is missing)")
    return http.client.HTTPSConnection(where.hostname, where.port or 443, timeout=timeout, context=context)


def private_file(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """Open (creating it mode 0600 if missing) a file only its owner may read; returns the fd."""
    return os.open(path, flags | os.O_CREAT, 0o600)


def write_once(path: Path, data: bytes) -> None:
    """Make `path` (mode 0600) with `data` unless it exists: complete or not at all, and of two
    racing creators one wins whole (a hard link of a complete file: no reader sees it empty)."""
    write_atomic(path, data, exclusive=True)


def cache_dir() -> Path:
    """The machine's one cache (image builds, the KVM probe's answer): $UNDERCLOUD_CACHE,
    else ~/.cache/undercloud. Shared by every home on the machine."""
    env = os.environ.get("UNDERCLOUD_CACHE")
    path = Path(env) if env else Path.home() / ".cache" / "undercloud"
    path.mkdir(parents=True, exist_ok=True)
    return path
