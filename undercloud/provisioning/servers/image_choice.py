"""Which image a server runs, and where that image's content is on this worker.

Image records are shared by every worker while their content is per home, so the choice
takes the newest image of the name that suits the hypervisor type and whose content some
live worker has (fetched here when it is another's). `images` is the image store
(`env.images`, images.store.ImageStore).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from undercloud import server_types
from undercloud.errors import Conflict, NotFound, UndercloudError
from undercloud.store.servers import Server


def choose_image(images: Any, ref: str, ht: str, flavor_name: str, formats: tuple[str, ...]) -> dict:
    """The image named (or with id) `ref` for hypervisor type `ht`; the newest if several."""
    if images is None:
        raise UndercloudError("no image store in this undercloud", "image")
    try:
        one = images.get(ref)  # by id: must suit the flavor too
        candidates = [one] if one["id"] == ref else images.list(name=ref)
    except (NotFound, Conflict):
        candidates = images.list(name=ref)
    if not candidates:
        raise NotFound(f"no image named {ref!r} (see `undercloud image list`)", "image")
    # "missing": the content is on another worker (records are shared, content per home)
    fits = [i for i in candidates if i.get("hypervisor_type") == ht
            and (not formats or i["disk_format"] in formats) and i.get("status") in ("active", "missing")]
    if not fits:
        have = ", ".join(sorted({f"{i.get('hypervisor_type') or 'no hypervisor_type'} ({i['disk_format']})"
                                 for i in candidates}))
        kind = "oci" if ht == server_types.CONTAINER else "qcow2"
        raise Conflict(f"no {ht} image named {ref!r}: flavor {flavor_name!r} asks for hypervisor_type {ht}, "
                       f"{ref!r} exists for: {have} (build one: undercloud image build {ref} --type {kind})",
                       "image")
    for i in sorted(fits, key=lambda i: i.get("created_at") or "", reverse=True):
        if i["status"] == "active" or images.ensure_blob(i).exists():  # fetched from the worker that has it
            return i
    raise Conflict(f"image {ref!r}: its content is on no live worker (`undercloud image list` says missing)",
                   "image")


def server_image(images: Any, row: Server, image: dict | None = None) -> tuple[dict, Path | None]:
    """The image of server `row` (`image` when given, e.g. a rebuild's new one) and the path
    of its content, for the server's Spec. An image deleted since stays known by the id and
    name the server recorded."""
    img = image
    if img is None:
        try:
            img = images.get(row.image_id) if images is not None else None
        except NotFound:
            img = None
    img = img or {"id": row.image_id, "name": row.image_name, "disk_format": None, "checksum": None,
                  "properties": {}}
    path = None
    if images is not None and img.get("checksum"):
        path = images.ensure_blob(img) if img.get("id") and img.get("size") is not None \
            else images.blob_path(img["checksum"])
    return img, path
