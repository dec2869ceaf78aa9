"""Image store API: list/show/register/delete (admin), content upload (admin, verified),
content download (by image id, with HTTP Range and the sha256 in a header).

Downloads are public by id on purpose: nodes fetch their image before they hold any
credential, golden images carry no secrets, and ids are random (uuid4). Everything else
needs the admin token.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import FileResponse
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from undercloud.api.app import get_context, require_admin
from undercloud.api.context import Context
from undercloud.api.limits import LIMITS
from undercloud.errors import InvalidInput, NotFound
from undercloud.names import check_name

PUBLIC = True  # per-route: only the content download is open, see above
router = APIRouter(prefix="/v1/images")
ADMIN = [Depends(require_admin)]


@router.head("/blobs/{sha256}", dependencies=ADMIN)
def blob_exists(sha256: str, ctx: Context = Depends(get_context)):
    path = ctx.images.blob_path(sha256)
    if not ctx.images.has_blob(sha256):  # checked: corrupt content is removed, to be uploaded again
        return Response(status_code=404)
    return Response(headers={"x-image-sha256": sha256, "x-image-size": str(path.stat().st_size)})


@router.put("/blobs/{sha256}", dependencies=ADMIN)
async def put_blob(sha256: str, request: Request, size: int = Query(..., ge=0, le=LIMITS.image_bytes),
                   ctx: Context = Depends(get_context)):
    """Store content; refused unless exactly `size` bytes with this sha256 arrive."""
    await ctx.images.put_blob_async(request.stream(), sha256, size)
    return {"sha256": sha256.lower(), "size": size}


@router.get("", dependencies=ADMIN)
def list_images(name: str | None = None, hypervisor_type: str | None = None,
                ctx: Context = Depends(get_context)):
    return ctx.images.list(name=name, hypervisor_type=hypervisor_type)


class ImageItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    disk_format: Annotated[str, StringConstraints(max_length=16)]
    sha256: Annotated[str, StringConstraints(max_length=64)]
    properties: dict[Annotated[str, StringConstraints(max_length=255)], Any] = Field(default={}, max_length=100)


class Batch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    images: list[ImageItem] = Field(max_length=100)
    replace: bool = False
    # With replace: images (ids or podman tags) to keep anyway, e.g. a deployed set's.
    keep: list[Annotated[str, StringConstraints(max_length=255)]] = Field(default=[], max_length=1000)


_ITEM, _BATCH = TypeAdapter(ImageItem), TypeAdapter(Batch)


def _parse(adapter: TypeAdapter, body: Any):
    try:
        return adapter.validate_python(body)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise InvalidInput(e["msg"], ".".join(str(x) for x in e["loc"]) or "body") from None


@router.post("", dependencies=ADMIN, status_code=201)
def register(body: dict = Body(...), ctx: Context = Depends(get_context)):
    """Register one image ({name, disk_format, sha256, properties}) or a batch
    ({"images": [...], "replace": bool}) whose content is stored; all or nothing."""
    batch = _parse(_BATCH, body) if "images" in body else Batch(images=[_parse(_ITEM, body)])
    for i, item in enumerate(batch.images):
        check_name(item.name, "image", f"images[{i}].name" if "images" in body else "name")
    return ctx.images.register([i.model_dump() for i in batch.images], replace=batch.replace, keep=batch.keep)


@router.get("/{ref}", dependencies=ADMIN)
def show(ref: str, hypervisor_type: str | None = None, ctx: Context = Depends(get_context)):
    return ctx.images.get(ref, hypervisor_type)


@router.delete("/{ref}", dependencies=ADMIN)
def delete(ref: str, ctx: Context = Depends(get_context)):
    return ctx.images.delete(ref)


@router.api_route("/{image_id}/file", methods=["GET", "HEAD"])
def download(image_id: str, ctx: Context = Depends(get_context)):
    """The image's content; `Range: bytes=N-` resumes; `X-Image-Sha256` lets the receiver verify."""
    img = ctx.images.by_id(image_id)
    if img is None:
        raise NotFound(f"no image with id {image_id!r}", "image")
    path = ctx.images.ensure_blob(img, refuse_corrupt=True)  # checked: never serves corrupt content
    if not path.exists():
        raise NotFound(f"content of image {image_id} is missing from the store", "image")
    return FileResponse(path, media_type="application/octet-stream", headers={
        "x-image-sha256": img["checksum"], "x-image-size": str(img["size"]),
        "etag": f'"{img["checksum"]}"',
    })
