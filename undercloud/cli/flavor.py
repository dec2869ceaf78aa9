"""`undercloud flavor ...`: server sizes and how they are realised (Nova's flavors)."""

from __future__ import annotations

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import InvalidInput

COLUMNS = ["name", "vcpus", "ram", "disk", "hypervisor_type", "properties"]


def parse_properties(values: tuple[str, ...]) -> dict:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"expected KEY=VALUE, got {v!r}", "--property")
        out[key.strip()] = value.strip()
    return out


@click.group()
def flavor() -> None:
    """Flavors: the size of a server (vCPUs, RAM, disk) and how it is realised.

    The property `hypervisor_type` decides it: `baremetal` (a node through its BMC; the
    default), `vm` (a libvirt domain) or `container` (a podman system container). For bare
    metal, `capabilities:profile=control` picks nodes tagged with that profile, as TripleO
    does. The first start creates `baremetal`, `control`, `compute`, `container` and `vm`.
    """


@flavor.command("list")
@formatted(COLUMNS)
def list_():
    """List flavors."""
    return Client().get("/v1/flavors")


@flavor.command()
@click.argument("name")
@formatted()
def show(name: str):
    """Show one flavor."""
    return Client().get(f"/v1/flavors/{name}")


@flavor.command()
@click.argument("name")
@click.option("--vcpus", type=int, required=True, help="Virtual CPUs (a CPU limit for containers).")
@click.option("--ram", type=int, required=True, help="Memory in MB (a memory limit for containers).")
@click.option("--disk", type=int, required=True, help="Root disk in GB.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="e.g. hypervisor_type=container or capabilities:profile=control (repeatable).")
@formatted()
def create(name: str, vcpus: int, ram: int, disk: int, properties: tuple[str, ...]):
    """Create flavor NAME.

    \b
    undercloud flavor create small-ct --vcpus 1 --ram 256 --disk 5 --property hypervisor_type=container
    undercloud flavor create ceph --vcpus 1 --ram 4096 --disk 40 --property capabilities:profile=ceph
    """
    return Client().post("/v1/flavors", json={"name": name, "vcpus": vcpus, "ram": ram, "disk": disk,
                                              "properties": parse_properties(properties)})


@flavor.command()
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
def delete(names: tuple[str, ...]):
    """Delete flavors (servers keep the copy they were made with)."""
    client = Client()
    for name in names:
        client.delete(f"/v1/flavors/{name}")
        note(f"deleted flavor {name}")
