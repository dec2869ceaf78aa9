"""`undercloud image ...`: the image store (upload, list, show, delete, download) and the
image builder (build from elements)."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from undercloud.agent.files import Verified, VerifyError, sha256_file
from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import InvalidInput, NotFound, UndercloudError
from undercloud.images.catalog import DEFAULT_RELEASE, RELEASES
from undercloud.server_types import HYPERVISOR_TYPES

COLUMNS = ["id", "name", "disk_format", "hypervisor_type", "size", "status"]
EXT_FORMATS = {".qcow2": "qcow2", ".iso": "iso", ".raw": "raw", ".img": "raw", ".tar": "oci",
               ".kernel": "aki", ".vmlinuz": "aki", ".initramfs": "ari", ".initrd": "ari"}


def parse_properties(values: tuple[str, ...]) -> dict:
    props = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k.strip():
            raise InvalidInput(f"expected KEY=VALUE, got {v!r}", "--property")
        props[k.strip()] = val
    return props


def push_blob(client: Client, path: Path, sha256: str) -> None:
    """Send content unless the store has it already; the service verifies size and sha256."""
    try:
        client.request("HEAD", f"/v1/images/blobs/{sha256}")
        return  # stored once per checksum: nothing to send
    except NotFound:
        pass
    size = path.stat().st_size

    def chunks():
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                yield chunk

    client.put(f"/v1/images/blobs/{sha256}", params={"size": size}, content=chunks(),
               headers={"content-length": str(size)})


@click.group()
def image() -> None:
    """The image store and the image builder.

    Images have a name (not unique: `overcloud-full` exists once per hypervisor type), a
    disk format (raw, qcow2, iso, oci, aki = kernel, ari = ramdisk), a size, a sha256
    checksum and free-form properties such as hypervisor_type (baremetal, vm, container).
    Content is stored once per checksum under $UNDERCLOUD_HOME/images and served to nodes
    over the API with resumable downloads.
    """


@image.command("list")
@click.option("--name", help="Only images of this name.")
@click.option("--hypervisor-type", type=click.Choice(HYPERVISOR_TYPES),
              help="Only images for this hypervisor type.")
@formatted(COLUMNS)
def list_(name: str | None, hypervisor_type: str | None):
    """List images: id, name, disk format, hypervisor type, size, status."""
    params = {k: v for k, v in (("name", name), ("hypervisor_type", hypervisor_type)) if v}
    return Client().get("/v1/images", params=params)


@image.command()
@click.argument("image_ref", metavar="IMAGE")
@click.option("--hypervisor-type", type=click.Choice(HYPERVISOR_TYPES),
              help="Pick among images sharing a name.")
@formatted()
def show(image_ref: str, hypervisor_type: str | None):
    """Show one image (IMAGE is an id, or a name that is unique)."""
    params = {"hypervisor_type": hypervisor_type} if hypervisor_type else {}
    return Client().get(f"/v1/images/{image_ref}", params=params)


@image.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="Image name (need not be unique).")
@click.option("--disk-format", type=click.Choice(["raw", "qcow2", "iso", "oci", "aki", "ari"]),
              help="Disk format; guessed from the file name's extension when omitted.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="A property, e.g. hypervisor_type=vm (repeatable).")
@click.option("--checksum", metavar="SHA256",
              help="The sha256 the file must have (e.g. published with it); refused otherwise.")
@formatted()
def upload(file: Path, name: str, disk_format: str | None, properties: tuple[str, ...],
           checksum: str | None):
    """Upload FILE as a new image.

    The sha256 is computed here and sent with the size; the service verifies both before
    it stores anything, so a corrupt or truncated transfer is refused and nothing is
    registered. Content already stored (same sha256) is not sent again.
    """
    props = parse_properties(properties)
    fmt = disk_format or EXT_FORMATS.get(file.suffix.lower())
    if not fmt:
        raise InvalidInput("cannot tell the disk format from the extension; give --disk-format", str(file))
    sha = sha256_file(file)
    if checksum and checksum.lower() != sha:
        raise InvalidInput(f"file has sha256 {sha}, expected {checksum.lower()}: corrupt or wrong file", str(file))
    client = Client(timeout=600)
    push_blob(client, file, sha)
    return client.post("/v1/images", json={"name": name, "disk_format": fmt, "sha256": sha,
                                           "properties": props})[0]


@image.command()
@click.argument("image_refs", metavar="IMAGE...", nargs=-1, required=True)
def delete(image_refs: tuple[str, ...]):
    """Delete images (content used by no other image is removed too)."""
    client = Client()
    for ref in image_refs:
        img = client.delete(f"/v1/images/{ref}")
        note(f"deleted {img['name']} ({img['id']})")


@image.command()
@click.argument("image_ref", metavar="IMAGE")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write it (default: NAME.FORMAT in the current directory).")
@click.option("--hypervisor-type", type=click.Choice(HYPERVISOR_TYPES),
              help="Pick among images sharing a name.")
def download(image_ref: str, output: Path | None, hypervisor_type: str | None):
    """Download an image's content, verifying its sha256.

    An interrupted download leaves OUTPUT.part; running the command again resumes it
    (HTTP Range) instead of starting over.
    """
    client = Client(timeout=600)
    params = {"hypervisor_type": hypervisor_type} if hypervisor_type else {}
    img = client.get(f"/v1/images/{image_ref}", params=params)
    out = output or Path(f"{img['name']}.{img['disk_format']}")
    download_to(client, img, out)
    note(f"wrote {out} ({img['size']} bytes, sha256 verified)")


def download_to(client: Client, img: dict, out: Path) -> None:
    """The image's content into `out`, resuming `<out>.part` of an interrupted run;
    verified (agent/files.Verified) before it takes the name."""
    w = Verified(out, img["checksum"], img["size"], resume=True)
    try:
        if w.got < img["size"]:  # else the part is whole already: only to be checked
            headers = {"range": f"bytes={w.got}-"} if w.got else {}
            with client.stream("GET", f"/v1/images/{img['id']}/file", headers=headers) as r:
                if r.status not in (200, 206):
                    text = client.io(r.read).decode(errors="replace")
                    raise UndercloudError(f"download failed: HTTP {r.status} {text.strip()[:200]}", img["id"])
                if r.getheader("x-image-sha256", img["checksum"]) != img["checksum"]:
                    raise UndercloudError("download failed: the service sent other content than the image's", img["id"])
                if r.status == 200:
                    w.restart()
                while chunk := client.io(lambda: r.read(1 << 20)):
                    w.write(chunk)
        w.finish()
    except VerifyError as exc:
        if exc.field == "sha256":
            raise UndercloudError(f"downloaded content has sha256 {exc.digest}, expected {img['checksum']}; "
                                  f"removed it", str(out)) from None
        raise UndercloudError(f"download {exc}", str(out)) from None
    finally:
        w.discard()


@image.command()
@click.argument("name", required=False)
@click.option("--all", "all_", is_flag=True, help="Build every image a default deploy needs.")
@click.option("--type", "types", multiple=True, type=click.Choice(["oci", "qcow2", "ramdisk", "guest"]),
              help="Output(s) to build (default: the image's usual outputs).")
@click.option("--element", "elements", multiple=True, metavar="E",
              help="Add an element to the image (repeatable).")
@click.option("--elements-path", "elements_path", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A directory of your own elements, searched before the shipped ones (repeatable).")
@click.option("--release", type=click.Choice(list(RELEASES)), default=None,
              help=f"The OpenStack release of service images: {' or '.join(f'{r} (Debian {s})' for r, s in RELEASES.items())}; "
                   f"default {DEFAULT_RELEASE}, as a deploy's OvercloudRelease picks.")
@click.option("--no-cache", is_flag=True, help="Rebuild every stage, even if unchanged.")
@formatted(["id", "name", "disk_format", "hypervisor_type", "size", "status"])
def build(name: str | None, all_: bool, types: tuple[str, ...], elements: tuple[str, ...],
          elements_path: tuple[Path, ...], release: str | None, no_cache: bool):
    """Build an image from elements and register it in the image store.

    \b
    Images the undercloud knows:
      overcloud-full   the node image: oci (containers), qcow2 (VMs and bare metal)
      deploy-ramdisk   kernel + initramfs with the agent, and a bootable ISO
      service-NAME     a service's container image, from element NAME (memcached,
                       haproxy, ...: every one the service library declares)
      guest-tiny       a tiny qcow2 for overcloud instances (busybox; DHCP, metadata,
                       user data), for the overcloud's Glance; not built by --all

    Builds run here (they need root: chroot, loop devices), cached by content in
    $UNDERCLOUD_CACHE (default ~/.cache/undercloud): an unchanged image is not rebuilt, a
    changed element rebuilds only what uses it. Progress goes to stderr; on failure the
    message names the element and phase, and the build log is kept.
    """
    from undercloud.images import catalog

    if all_ == bool(name):
        raise InvalidInput("give an image NAME or --all (not both)", "image build")
    if all_:
        from undercloud.overcloud.library import library_images

        targets = catalog.default_targets(library_images(), release)
    else:
        targets = catalog.targets(name, types, elements, release)
    return build_targets(Client(timeout=600), [t.with_elements_path(elements_path) for t in targets], no_cache)


def build_jobs() -> int:
    """How many builds run at once: UNDERCLOUD_BUILD_JOBS, else one per CPU core (at most 4):
    a build waits on apt's downloads and podman's disk writes as much as on its CPU."""
    from undercloud.limits import Limit, LimitSet

    return LimitSet((Limit("jobs", "UNDERCLOUD_BUILD_JOBS", max(1, min(os.cpu_count() or 1, 4)),
                           "image builds at once"),)).jobs


def build_targets(client: Client, targets: list, no_cache: bool = False, say=note, progress=None,
                  jobs: int | None = None) -> list[dict]:
    """Build (or find up to date) and register each target; returns the image records, in
    the targets' order. Independent builds run `jobs` at a time (build_jobs()): a layer two
    of them share is made once, the other waiting for it (images/rootfs.locked). The first
    failure stops the builds not started yet and is raised once the running ones end.
    `say` and `progress` take its lines (a workflow's events in the service; stderr here)."""
    jobs = min(jobs or build_jobs(), len(targets))
    if jobs <= 1:
        return [r for t in targets for r in _build_one(client, t, no_cache, say, progress)]
    with ThreadPoolExecutor(jobs, thread_name_prefix="image-build") as pool:
        futures = [pool.submit(_build_one, client, t, no_cache, say, progress) for t in targets]
        try:
            return [r for f in futures for r in f.result()]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def _build_one(client: Client, t, no_cache: bool, say, progress) -> list[dict]:
    from undercloud.images import build as builder
    from undercloud.overcloud import deployed

    existing = client.get("/v1/images", params={"name": t.name})
    start = time.monotonic()
    result = builder.build(t, no_cache=no_cache, registered=existing, progress=progress or _progress,
                           log_dir=client.home.path / "images" / "logs")
    if result.up_to_date:
        say(f"{t.label}: up to date ({result.key[:12]}), nothing to do")
        return result.current
    for art in result.artifacts:
        if not art.path.exists():
            raise UndercloudError(f"{t.label}: build output {art.path} vanished before its upload "
                                  f"(removed from the shared cache by another build?): run again", "image build")
        push_blob(client, art.path, art.sha256)
    # Older images of the name go, except those a deployed set of any stack still names.
    sets = client.get("/v1/overcloud-state", params={"name": deployed.NAME})
    done = client.post("/v1/images", json={"images": result.registrations(), "replace": True,
                                           "keep": deployed.kept(sets.values())})
    say(f"{t.label}: built and registered in {time.monotonic() - start:.1f} s")
    return done


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
