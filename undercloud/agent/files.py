"""Files written whole or not at all, and content checked against its sha256: the one place
for both, used by every layer (the agent's package is standard library only and imports
nothing else, so every layer may import it: the undercloud, its CLI and the nodes share it).

- `write_atomic`: a temporary file in the same directory, made with its final mode (0600
  unless said: never readable by others for a moment), written, fsync'ed, renamed over the
  file (or linked, when it must be made once), and the directory fsync'ed. A crash at any
  point leaves the old file or the new one, whole; the temporary file goes on every path.
- `Verified`: content written to a temporary file while hashed; `finish` checks its size and
  sha256, fsyncs and renames it in place; `discard` (or leaving its `with`) drops it.
- `download`: a URL into a file through `Verified`, resuming a broken transfer.

Temporary names start with "." and end with ".tmp" (`temp_name`), so that what a killed
process left behind is recognised and removed at the next start (`remove_temps`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from pathlib import Path

CHUNK = 1 << 20


def temp_name(path: Path) -> Path:
    """A fresh temporary name beside `path` (`.<name>.<random>.tmp`)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def fsync_dir(path: Path) -> None:
    """Make a rename or a new name in `path` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory; the rename itself stands
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str, mode: int = 0o600, *, exclusive: bool = False,
                 owner: tuple[int, int] = (-1, -1), parents: bool = True) -> bool:
    """Replace `path` with `data` (mode `mode` from creation; owner uid, gid if given),
    whole or not at all; its directory made unless `parents` is False. With `exclusive`,
    make it only if missing: of two racing creators one wins whole and the other gets
    False (a reader never sees it empty)."""
    path = Path(path)
    if exclusive and path.exists():
        return False
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o600)  # umask may only narrow it
    try:
        try:
            _write_all(fd, data.encode() if isinstance(data, str) else data)
            if owner != (-1, -1):
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # the exact mode (after the owner: a chown clears set-id bits)
            os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def remove_temps(root: Path) -> list[str]:
    """Remove what a killed process left of temporary files and directories (`temp_name`
    names) anywhere below `root`; returns their paths."""
    import shutil  # here: it imports the compression modules, which the CLI's start need not pay

    removed = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            if is_temp(name):
                p = Path(dirpath) / name
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                removed.append(str(p))
        dirnames[:] = [d for d in dirnames if not is_temp(d)]
    return removed


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


class VerifyError(ValueError):
    """Content that is not what was announced; `field` is "size" or "sha256"."""

    def __init__(self, message: str, field: str, got: int, digest: str = ""):
        super().__init__(message)
        self.field, self.got, self.digest = field, got, digest


class Verified:
    """Content for `dest`, written to a temporary file while hashed; `finish` checks it has
    `size` bytes (when given) and the sha256 `sha256` and only then moves it in place, made
    durable (file and directory fsync'ed; not with `durable=False`, for content used once
    and removed: an image archive loaded into podman). `tmp_dir` holds the temporary file
    (same file system as `dest`); `resume` keeps and extends a partial `<dest>.part` of an
    earlier run."""

    def __init__(self, dest: Path, sha256: str, size: int | None = None, *, mode: int = 0o644,
                 tmp_dir: Path | None = None, resume: bool = False, durable: bool = True):
        self.dest, self.sha256, self.size, self.mode = Path(dest), sha256.lower(), size, mode
        self.durable = durable
        self.h, self.got, self.done = hashlib.sha256(), 0, False
        if resume:
            self.tmp = self.dest.with_name(self.dest.name + ".part")
            if self.tmp.exists() and (size is None or self.tmp.stat().st_size <= size):
                with open(self.tmp, "rb") as f:
                    while chunk := f.read(CHUNK):
                        self.h.update(chunk)
                        self.got += len(chunk)
            else:
                self.tmp.unlink(missing_ok=True)
            self.f = open(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
        else:
            self.tmp = temp_name(Path(tmp_dir) / self.dest.name if tmp_dir else self.dest)
            self.f = open(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")

    def restart(self) -> None:
        """Start over (a server that ignored a range request sends everything)."""
        self.f.seek(0)
        self.f.truncate()
        self.h, self.got = hashlib.sha256(), 0

    def write(self, chunk: bytes) -> None:
        self.got += len(chunk)
        if self.size is not None and self.got > self.size:
            raise VerifyError(f"larger than the announced {self.size} bytes", "size", self.got)
        self.h.update(chunk)
        self.f.write(chunk)

    def finish(self) -> Path:
        self.f.flush()
        if self.durable:
            os.fsync(self.f.fileno())
        self.f.close()
        if self.size is not None and self.got != self.size:
            if self.got > self.size:
                raise VerifyError(f"larger than the announced {self.size} bytes", "size", self.got)
            raise VerifyError(f"truncated: received {self.got} of {self.size} bytes", "size", self.got)
        digest = self.h.hexdigest()
        if digest != self.sha256:
            self.tmp.unlink(missing_ok=True)  # a resumed part too: it is no good
            raise VerifyError(f"corrupt: the {self.got} bytes have sha256 {digest}, expected {self.sha256}",
                              "sha256", self.got, digest)
        os.chmod(self.tmp, self.mode)
        os.replace(self.tmp, self.dest)
        if self.durable:
            fsync_dir(self.dest.parent)
        self.done = True
        return self.dest

    def discard(self) -> None:
        """Drop the temporary file (a resumable part is kept for the next run)."""
        self.f.close()
        if not self.done and not self.tmp.name.endswith(".part"):
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> Verified:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def undercloud_tls(url: str):
    """The TLS context for an https URL of the undercloud from a hook: its CA alone
    (UNDERCLOUD_CA_FILE, the agent's copy), else the system's trust (None)."""
    ca = os.environ.get("UNDERCLOUD_CA_FILE")
    if not (ca and url.startswith("https:")):
        return None
    import ssl

    return ssl.create_default_context(cafile=ca)


def download(url: str, dest: Path, sha256: str | None = None, size: int | None = None, *,
             attempts: int = 1, timeout: float = 60, mode: int = 0o644, resume: bool = False,
             durable: bool = True, sha256_header: str = "X-Image-Sha256", say=None) -> Path:
    """Fetch `url` into `dest` (in place only once verified), retrying a broken transfer
    from where it stopped (`attempts` in all; `resume` also keeps a part between runs). The
    sha256 is `sha256`, else the one the server sends in `sha256_header` (none: refused,
    never taken unchecked). Raises VerifyError for content that is not the announced one
    (or incomplete after every attempt), HTTPError for a 4xx, OSError when nothing came."""
    import urllib.error  # here: the CLI and config.py import this module and need no HTTP
    import urllib.request

    w = Verified(dest, sha256, size, mode=mode, resume=resume, durable=durable) if sha256 else None
    last = ""
    try:
        for attempt in range(attempts):
            if attempt:
                if say:
                    say(f"download interrupted at {w.got if w else 0} of {size} bytes ({last}); resuming")
                time.sleep(min(2 ** (attempt - 1), 10))
            if w is not None and size is not None and w.got >= size:
                return w.finish()  # a part kept from an earlier run was already whole
            req = urllib.request.Request(url)
            if w is not None and w.got:
                req.add_header("Range", f"bytes={w.got}-")
            try:
                with urllib.request.urlopen(req, timeout=timeout, context=undercloud_tls(url)) as resp:
                    if w is None:
                        want = resp.headers.get(sha256_header, "")
                        if not want:
                            raise VerifyError(f"{sha256_header} missing: the content cannot be verified",
                                              "sha256", 0)
                        w = Verified(dest, want, size, mode=mode, durable=durable)
                    elif w.got and resp.status != 206:  # the server ignored the range: start over
                        w.restart()
                    while chunk := resp.read(CHUNK):
                        w.write(chunk)
                if size is None or w.got >= size:
                    return w.finish()
                last = f"connection closed after {w.got} bytes"
            except urllib.error.HTTPError as exc:
                if 400 <= exc.code < 500:
                    raise
                last = f"HTTP {exc.code}"
            except OSError as exc:  # URLError, a reset, a timeout
                last = str(getattr(exc, "reason", exc))
        if w is None:
            raise OSError(f"cannot fetch {url}: {last}")
        raise VerifyError(f"incomplete: received {w.got} of {size} bytes after {attempts} attempt(s) ({last})",
                          "size", w.got)
    finally:
        if w is not None:
            w.discard()
