"""The images the undercloud knows how to build, and their elements per output type."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from undercloud.errors import InvalidInput

if TYPE_CHECKING:  # the builder (and its store, SQLAlchemy) only when a build is asked: the CLI starts fast
    from undercloud.images.build import Target

NODE = ("base", "agent")
TYPE_ELEMENTS = {
    "oci": NODE,                                         # a system container: no kernel, no init
    "qcow2": NODE + ("kernel", "node-boot", "growroot", "container-host"),  # systemd, networkd, extlinux, podman
    "ramdisk": NODE + ("kernel", "deploy-ramdisk"),      # /init runs the agent, disk tools
    "guest": ("base", "guest-tiny"),                     # an overcloud instance: no agent, no systemd
}
IMAGES = {
    "overcloud-full": ("oci", "qcow2"),
    "deploy-ramdisk": ("ramdisk",),
    "guest-tiny": ("guest",),  # for the overcloud's Glance; a deploy does not need it
}
SERVICE_BASE = ("base", "service-base")  # service-NAME: this shared layer + element NAME
# ... or, for an element that lists it among its deps, this one: the libraries OpenStack's
# services share, installed once in the layer below each service's own (Kolla's openstack-base)
OPENSTACK_BASE = (*SERVICE_BASE, "openstack-base")
# The OpenStack releases a service image may be, and the Debian suite that ships each: the
# service's packages are that suite's (OvercloudRelease: overcloud/release.py).
RELEASES = {"zed": "bookworm", "2025.1": "trixie"}
DEFAULT_RELEASE = "2025.1"
# The undercloud's own worker is no OpenStack service: its payload is this host's Python and
# libraries (images/payload.py, compiled ones too), so its image is of the Debian whose
# python3 is this Python, whatever the release (a Debian 13 host: trixie's 3.13).
RELEASE_FREE = {"service-undercloud-worker"}
PYTHON_SUITES = {(3, 11): "bookworm", (3, 13): "trixie"}


def targets(name: str, types: tuple[str, ...] = (), extra: tuple[str, ...] = (),
            release: str | None = None) -> list[Target]:
    """What building image `name` makes; a service image of `release` (default
    DEFAULT_RELEASE) comes from that release's Debian suite."""
    from undercloud.images.build import Target

    if name.startswith("service-"):
        if types and types != ("oci",):
            raise InvalidInput("service images are built as oci only", "--type")
        release = release or DEFAULT_RELEASE
        if release not in RELEASES:
            raise InvalidInput(f"unknown OpenStack release {release!r}: {' or '.join(RELEASES)}", "release")
        element = name.removeprefix("service-")
        return [Target(name, "oci", (element, *extra), layer_on=shared_layer(element),
                       suite=host_python_suite() if name in RELEASE_FREE else RELEASES[release])]
    if release:
        raise InvalidInput(f"{name} is no service image: only service images have an OpenStack release", "release")
    if not types:
        if name not in IMAGES:
            raise InvalidInput(f"unknown image {name!r}: give --type (oci, qcow2, ramdisk, guest) to build it "
                               f"from the default elements of that type plus --element", "image build")
        types = IMAGES[name]
    return [Target(name, t, TYPE_ELEMENTS[t] + tuple(e for e in extra if e not in TYPE_ELEMENTS[t]))
            for t in dict.fromkeys(types)]


def shared_layer(element: str) -> tuple[str, ...]:
    """The elements of the shared layer a service image of `element` is built on."""
    from undercloud.images import elements

    try:
        deps = {e.name for e in elements.resolve([element])}
    except InvalidInput:  # an element of the operator's (--elements-path): the builder finds it
        return SERVICE_BASE
    return OPENSTACK_BASE if OPENSTACK_BASE[-1] in deps else SERVICE_BASE


def host_python_suite() -> str:
    """The Debian suite whose python3 is this Python ("": the builder's default suite)."""
    return PYTHON_SUITES.get(sys.version_info[:2], "")


def default_targets(service_images: list[str], release: str | None = None) -> list[Target]:
    """What a deploy needs (`image build --all`): the node images and `service_images`
    (the service library declares which) of `release`."""
    out = [t for name, types in IMAGES.items() if "guest" not in types for t in targets(name)]
    return out + [t for s in service_images for t in targets(s, release=release)]
