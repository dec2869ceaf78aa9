"""The image store (Glance-like): records in the database, content on disk once per sha256.

Content is written to a temporary file, verified against the size and sha256 the sender
announced, fsync'ed, and only then renamed into `images/blobs/<sha256>` (the directory
fsync'ed after: agent/files.Verified); records are added only for content already stored,
so a failed or corrupt upload leaves nothing registered. Content is checked again before
it is used or served (`ensure_blob`): hashed once per process per file version (inode,
mtime, size), so a blob damaged on disk (a crash of an older version, a bad disk, a hand)
is refused with one line, logged and removed, to be fetched from another worker or
uploaded again, never handed out. Several workers share the records (the store) but each
keeps content in its own home: content one lacks is fetched from another worker when
needed (`ensure_blob`).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import select

from undercloud.agent.files import Verified, VerifyError, sha256_file
from undercloud.config import Home, connection
from undercloud.errors import Conflict, InvalidInput, NotFound, UndercloudError
from undercloud.server_types import HYPERVISOR_TYPES
from undercloud.store import Store
from undercloud.store.images import Image

DISK_FORMATS = ("raw", "qcow2", "iso", "oci", "aki", "ari")
CHUNK = 1 << 20
FETCH_TIMEOUT = 60.0  # seconds without a byte from the worker serving the content
log = logging.getLogger("undercloud.images")


def _check_sha(sha256: str) -> str:
    s = (sha256 or "").lower()
    if len(s) != 64 or any(c not in "0123456789abcdef" for c in s):
        raise InvalidInput(f"not a sha256 checksum: {sha256!r}", "sha256")
    return s


class CorruptContent(NotFound):
    """Stored content whose sha256 is not its name any more: removed, never served."""


def validate(name: str, disk_format: str, properties: dict) -> None:
    """The checks a registration must pass; each failure names the field."""
    if not name or not name.strip() or len(name) > 255:
        raise InvalidInput("an image needs a name (1-255 characters)", "name")
    if disk_format not in DISK_FORMATS:
        raise InvalidInput(f"unknown disk format {disk_format!r}; one of {', '.join(DISK_FORMATS)}", "disk_format")
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a mapping", "properties")
    ht = properties.get("hypervisor_type")
    if ht is not None and ht not in HYPERVISOR_TYPES:
        raise InvalidInput(f"unknown hypervisor_type {ht!r}; one of {', '.join(HYPERVISOR_TYPES)}",
                           "properties.hypervisor_type")


class ImageStore:
    def __init__(self, home: Home, store: Store):
        self.ca_file = home.ca_file  # the other workers' https URLs are verified with it
        self.root = home.path / "images"
        self.blobs = self.root / "blobs"
        self.tmp = self.root / "tmp"
        self.store = store
        # the API URLs of the other live workers: content this worker lacks is fetched from them
        self.peers: Callable[[], list[str]] = lambda: []
        # blob -> the (inode, mtime, size) whose content was found to have its sha256
        self._intact: dict[str, tuple[int, int, int]] = {}
        self._checking: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        for d in (self.blobs, self.tmp):
            d.mkdir(parents=True, exist_ok=True)

    # ---- content -------------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        return self.blobs / _check_sha(sha256)

    def has_blob(self, sha256: str) -> bool:
        """Whether intact content with this sha256 is stored (`check_blob`)."""
        return self.check_blob(sha256)

    def check_blob(self, sha256: str) -> bool:
        """True when the content is stored and still has its sha256; content that does not
        is logged and removed (False). Hashed once per process per version of the file (its
        inode, mtime and size): an image is hundreds of MB, and a replaced file is new."""
        path = self.blob_path(sha256)
        with self._lock:
            lock = self._checking.setdefault(path.name, threading.Lock())
        with lock:  # of several callers at once, one hashes; the others take its answer
            try:
                st = path.stat()
            except FileNotFoundError:
                return False
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._intact.get(path.name) == key:
                return True
            got = sha256_file(path)
            if got == path.name:
                self._intact[path.name] = key
                return True
            log.error("image content %s is corrupt on disk (its %d bytes have sha256 %s): removed; "
                      "it is fetched from another worker or must be uploaded again", path.name, st.st_size, got)
            self._intact.pop(path.name, None)
            path.unlink(missing_ok=True)
            return False

    def ensure_blob(self, image: dict, refuse_corrupt: bool = False) -> Path:
        """The image's content, checked (`check_blob`); when this worker lacks it (each
        keeps content in its own home, the records are shared) or it was corrupt, fetched
        from another worker's public download and verified. The path is returned missing
        when no worker has it: the caller says so; with `refuse_corrupt`, content found
        corrupt and not fetched again raises CorruptContent instead."""
        path = self.blob_path(image["checksum"])
        existed = path.exists()
        if self.check_blob(image["checksum"]):
            return path
        for url in self.peers():
            try:
                return self._fetch(url, image)
            except (OSError, http.client.HTTPException, UndercloudError) as exc:
                log.info("image %s: not fetched from %s: %s", image["id"], url, exc)
        if existed and refuse_corrupt:
            raise CorruptContent(f"the content of image {image.get('name')} ({image['id']}) was corrupt on disk "
                                 f"(not its sha256 {image['checksum'][:12]}) and was removed: upload or build it "
                                 f"again", "image")
        return path

    def _fetch(self, url: str, image: dict) -> Path:
        conn = connection(url, self.ca_file, FETCH_TIMEOUT)  # another worker: the store's CA
        try:
            conn.request("GET", f"/v1/images/{quote(image['id'])}/file")
            r = conn.getresponse()
            if r.status != 200:
                raise UndercloudError(f"HTTP {r.status}")
            path = self.put_blob(iter(lambda: r.read(1 << 20), b""), image["checksum"], int(image["size"]))
        finally:
            conn.close()
        log.info("image %s (%s): content fetched from the worker at %s", image["name"], image["id"], url)
        return path

    def put_blob(self, chunks: Iterable[bytes], sha256: str, size: int) -> Path:
        """Store content that must have exactly `size` bytes and this sha256, or nothing."""
        w = _BlobWriter(self, sha256, size)
        try:
            for chunk in chunks:
                w.write(chunk)
            return w.finish()
        finally:
            w.discard()

    async def put_blob_async(self, chunks, sha256: str, size: int) -> Path:
        """`put_blob` for an async byte stream (the API's request body)."""
        w = _BlobWriter(self, sha256, size)
        try:
            async for chunk in chunks:
                w.write(chunk)
            # its fsync waits for the disk (seconds for a large image): not on the event loop
            return await asyncio.to_thread(w.finish)
        finally:
            w.discard()

    def gc(self, min_age: float = 3600.0) -> list[str]:
        """Remove unreferenced content older than `min_age` s and stale temporary files."""
        now = time.time()
        for p in self.tmp.iterdir():
            if now - p.stat().st_mtime > min_age:
                p.unlink(missing_ok=True)
        with self.store.session() as s:
            used = set(s.scalars(select(Image.checksum)))
        removed = []
        for p in self.blobs.iterdir():
            if p.name not in used and now - p.stat().st_mtime > min_age:
                p.unlink(missing_ok=True)
                removed.append(p.name)
        return removed

    # ---- records -------------------------------------------------------------------
    def register(self, items: list[dict], replace: bool = False, keep: Iterable[str] = ()) -> list[dict]:
        """Register images whose content is stored, all in one transaction.

        Each item: name, disk_format, sha256, properties. A property value "#N" is replaced
        by the id of the Nth item (so a batch can link an ISO to its kernel and ramdisk).
        With `replace`, earlier images of the same name, hypervisor_type and Debian release
        (os_version: a service's images of two OpenStack releases are kept apart) are removed in
        the same transaction (content they alone used is removed after), except those a
        stack still names (its current or previous deployed set: something to roll back
        to) and those `keep` names (ids or podman tags).
        """
        if not items:
            raise InvalidInput("nothing to register", "images")
        ids = [str(uuid.uuid4()) for _ in items]
        rows = []
        for i, item in enumerate(items):
            where = f"images[{i}]" if len(items) > 1 else None
            try:
                name, fmt = item.get("name", ""), item.get("disk_format", "")
                props = dict(item.get("properties") or {})
                validate(name, fmt, props)
                sha = _check_sha(item.get("sha256", ""))
            except InvalidInput as exc:
                raise InvalidInput(exc.message, ".".join(x for x in (where, exc.where) if x)) from None
            path = self.blobs / sha
            if not path.exists():
                raise NotFound(f"no stored content with sha256 {sha}; upload it first", where or name)
            for k, v in props.items():
                if isinstance(v, str) and v.startswith("#") and v[1:].isdigit():
                    n = int(v[1:])
                    if n >= len(items):
                        raise InvalidInput(f"{v} refers past the end of the batch", f"properties.{k}")
                    props[k] = ids[n]
            rows.append(Image(id=ids[i], name=name, disk_format=fmt, size=path.stat().st_size,
                              checksum=sha, status="active", properties=props))
        replaced: list[Image] = []
        kept = set(keep)
        with self.store.session() as s:
            if replace:
                named = [text for _name, text in _stack_texts(s)]
                for r in rows:
                    ht = r.properties.get("hypervisor_type")
                    for old in s.scalars(select(Image).where(Image.name == r.name)):
                        if old.properties.get("hypervisor_type") == ht and old.id not in ids \
                                and old.disk_format == r.disk_format and not _still_used(old, kept, named) \
                                and old.properties.get("os_version") == r.properties.get("os_version"):
                            replaced.append(old)
                            s.delete(old)
            s.add_all(rows)
        self._drop_unused({o.checksum for o in replaced})
        return [self._show(r) for r in rows]

    def list(self, name: str | None = None, hypervisor_type: str | None = None) -> list[dict]:
        with self.store.session() as s:
            q = select(Image).order_by(Image.name, Image.created_at)
            if name:
                q = q.where(Image.name == name)
            rows = list(s.scalars(q))
        out = [self._show(r) for r in rows]
        if hypervisor_type:
            out = [r for r in out if r["hypervisor_type"] == hypervisor_type]
        return out

    def by_id(self, image_id: str) -> dict | None:
        """The image with this id (never by name: what a download asks for), or None."""
        with self.store.session() as s:
            row = s.get(Image, image_id)
            return self._show(row) if row else None

    def get(self, ref: str, hypervisor_type: str | None = None) -> dict:
        """One image by id, or by name when that name (and hypervisor type) is unique."""
        img = self.by_id(ref)
        if img:
            return img
        found = self.list(name=ref, hypervisor_type=hypervisor_type)
        if not found:
            raise NotFound(f"no image with id or name {ref!r}"
                           + (f" and hypervisor_type {hypervisor_type!r}" if hypervisor_type else ""), "image")
        if len(found) > 1:
            choices = ", ".join(f"{r['id']} ({r['disk_format']}, {r['hypervisor_type'] or '-'})" for r in found)
            raise Conflict(f"{len(found)} images are named {ref!r}; give an id: {choices}", "image")
        return found[0]

    def delete(self, ref: str) -> dict:
        """Remove an image, unless a stack still names it (its current or previous
        deployed set: what runs, or what a rollback returns to)."""
        img = self.get(ref)
        with self.store.session() as s:
            row = s.get(Image, img["id"])
            if row is None:
                raise NotFound(f"image {ref!r} was deleted meanwhile", "image")
            users = sorted(name for name, text in _stack_texts(s) if _still_used(row, set(), [text]))
            if users:
                raise Conflict(f"image {img['name']} ({img['id']}) is used by stack {', '.join(users)} (what it "
                               f"runs or would roll back to): update or delete the stack first", "image")
            s.delete(row)
        self._drop_unused({img["checksum"]})
        return img

    def path(self, ref: str) -> Path:
        return self.blob_path(self.get(ref)["checksum"])

    def podman_image(self, ref: str, hypervisor_type: str | None = None) -> str:
        """The podman tag of an oci image, loaded back from the stored archive if podman
        no longer has it (for container nodes and services)."""
        img = self.get(ref, hypervisor_type)
        tag = img["properties"].get("podman_image")
        if img["disk_format"] != "oci" or not tag:
            raise InvalidInput(f"image {img['name']} ({img['id']}) is not a podman image", "image")
        from undercloud.images.disk import ensure_podman_image

        ensure_podman_image(tag, self.ensure_blob(img), lambda _m: None)
        return tag

    def _drop_unused(self, checksums: set[str]) -> None:
        if not checksums:
            return
        with self.store.session() as s:
            used = set(s.scalars(select(Image.checksum).where(Image.checksum.in_(checksums))))
        for c in checksums - used:
            (self.blobs / c).unlink(missing_ok=True)

    def _show(self, row: Image) -> dict:
        d = row.as_dict()
        if not (self.blobs / row.checksum).exists():
            d["status"] = "missing"  # content removed behind our back: say so, never serve it
        return d


def _stack_texts(session) -> list[tuple[str, str]]:
    """Every root stack's name and its current and previous templates and parameters, as
    text: what a deployed set names (podman tags in environments, image ids in download
    paths)."""
    from undercloud.store.stacks import Stack

    rows = session.execute(select(Stack.name, Stack.bundle, Stack.parameters, Stack.prev_bundle,
                                  Stack.prev_parameters).where(Stack.parent_id.is_(None)))
    return [(r[0], json.dumps(list(r[1:]), default=str)) for r in rows]


def _still_used(image: Image, kept: set[str], stack_texts: list[str]) -> bool:
    names = {image.id, (image.properties or {}).get("podman_image")} - {None, ""}
    return bool(names & kept) or any(n in t for n in names for t in stack_texts)


class _BlobWriter(Verified):
    """Content for `images/blobs/<sha256>` (agent/files.Verified: temporary file, sha256,
    fsync, rename, directory fsync), with the store's one-line errors."""

    def __init__(self, images: ImageStore, sha256: str, size: int):
        if size < 0:
            raise InvalidInput("size must not be negative", "size")
        sha = _check_sha(sha256)
        super().__init__(images.blobs / sha, sha, size, tmp_dir=images.tmp)
        self.images = images

    def write(self, chunk: bytes) -> None:
        try:
            super().write(chunk)
        except VerifyError as exc:
            raise InvalidInput(f"upload is {exc}", exc.field) from None

    def finish(self) -> Path:
        try:
            path = super().finish()
        except VerifyError as exc:
            raise InvalidInput(f"upload {exc}" if exc.field == "size" else
                               f"upload corrupt: content has sha256 {exc.digest}, announced {self.sha256}",
                               exc.field) from None
        st = path.stat()  # hashed while written: no need to read it again in this process
        self.images._intact[path.name] = (st.st_ino, st.st_mtime_ns, st.st_size)
        return path


def startup(ctx) -> None:
    """Service start: drop temporary uploads and unreferenced content left by a crash."""
    ctx.images.gc()
