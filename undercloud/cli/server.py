"""`undercloud server ...`: the machines stacks made (bare metal, VMs, containers)."""

from __future__ import annotations

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.server_types import CONTAINER, HYPERVISOR_TYPES

LIGHTEST_FIRST = HYPERVISOR_TYPES[::-1]  # container, vm, baremetal: as `--hypervisor-type` lists them

COLUMNS = ["id", "name", "status", "hypervisor_type", "flavor", "image", "addresses", "agent_checked_in"]


@click.group()
def server() -> None:
    """Servers: what an OS::Nova::Server resource of a stack becomes.

    A server's flavor decides how it is realised (its hypervisor_type): a bare-metal node
    through its BMC, a libvirt VM, or a podman system container; the image is the one of
    the requested name for that hypervisor type. Every server gets first-boot data with its
    own token, and its agent polls the undercloud. Statuses as Nova names them: BUILD,
    ACTIVE, SHUTOFF, REBUILD, ERROR.
    """


@server.command("list")
@formatted(COLUMNS)
def list_():
    """List servers with their status, addresses and whether their agent checked in."""
    return Client().get("/v1/servers")


@server.command()
@click.argument("ref", metavar="SERVER")
@formatted()
def show(ref: str):
    """Show one server (SERVER: id or name), its status asked live from its hypervisor."""
    return Client().get(f"/v1/servers/{ref}")


@server.command()
@click.argument("refs", metavar="SERVER...", nargs=-1, required=True)
@click.option("--wait", "wait", type=float, default=120.0, show_default=True,
              help="Seconds to wait for the removal to finish.")
def delete(refs: tuple[str, ...], wait: float):
    """Delete servers: remove the container / domain / deployment and their addresses.

    A server that belongs to a stack is better removed with the stack (`stack update` or
    `stack delete`); deleting it here leaves the stack's resource pointing at nothing.
    """
    client = Client(timeout=wait + 30)
    for ref in refs:
        out = client.delete(f"/v1/servers/{ref}", params={"wait": wait})
        note(f"{out['name']}: {'deleted' if out.get('deleted') else 'deleting (still in progress)'}")


@server.command()
@click.argument("ref", metavar="SERVER")
@click.option("--lines", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="How many last lines (at most 10000).")
def console(ref: str, lines: int):
    """Print the server's console: the serial console of a VM or node, a container's log."""
    click.echo(Client().get(f"/v1/servers/{ref}/console", params={"lines": lines})["console"], nl=False)


@server.command()
@click.argument("state", type=click.Choice(["on", "off"]))
@click.argument("ref", metavar="SERVER")
@formatted()
def power(state: str, ref: str):
    """Power a server on or off (start / stop for containers)."""
    return Client().post(f"/v1/servers/{ref}/action", json={"action": f"power-{state}"})


@server.command()
@click.argument("ref", metavar="SERVER")
@click.option("--image", help="Image name or id (default: the server's current image name).")
@formatted()
def rebuild(ref: str, image: str | None):
    """Rebuild a server in place from an image, keeping its declared persistent volumes."""
    return Client(timeout=300).post(f"/v1/servers/{ref}/action", json={"action": "rebuild", "image": image})


@server.command("network")
@click.option("--hypervisor-type", "ht", type=click.Choice(LIGHTEST_FIRST), default=CONTAINER,
              show_default=True, help="Whose servers' network.")
@formatted()
def network(ht: str):
    """The lab network servers of a hypervisor type are on, made if missing: its name (the
    address table's key), subnet, the undercloud's address on it, the addresses kept for
    virtual IPs, and (container) the hosts on it with their tunnels' ends.

    A worker on another host joins this host's container lab network with
    UNDERCLOUD_LAB_NETWORK=NAME (`undercloud deploy` does it for hypervisor hosts); then
    servers of both hosts share one subnet through a VXLAN tunnel between them. E.g.

    \b
      undercloud server network            # its `network`: the NAME to give another host's worker
    """
    return Client().get(f"/v1/hypervisors/{ht}/network")


@server.command("hypervisors")
@click.option("--forget", "forget", metavar="HOST", multiple=True,
              help="Remove a host that will not come back first: down, running no server; repeatable.")
@formatted(["name", "hypervisor_type", "state", "vcpus", "vcpus_used", "memory_mb", "memory_mb_used", "servers",
            "leftovers", "engine"])
def hypervisors(forget: tuple[str, ...]):
    """Hypervisor hosts for container and VM servers: capacity, use and state.

    Each undercloud worker registers its host (UNDERCLOUD_HOST, else the hostname); a host
    is up while a worker of it heart-beats. A new server goes to the host of the worker
    that makes it when that host can take it, else to the host that is up, has room and
    has the most free memory; the flavor property or scheduler hint
    capabilities:hypervisor_hostname=HOST pins it to one host. A server deleted while its
    host was down is gone at once; its machine stays there (`leftovers`) until the host's
    worker comes back and removes it. `engine`: the podman API service this host's container
    nodes drive, as the worker's watch last found it (restarted when it went bad). E.g.

    \b
      undercloud flavor create big-b --vcpus 2 --ram 4096 --disk 20 \\
          --property hypervisor_type=container --property capabilities:hypervisor_hostname=host-b
      undercloud server hypervisors --forget host-b   # retired: its worker will not start again
    """
    from urllib.parse import quote

    client = Client()
    for host in forget:
        client.delete(f"/v1/hypervisors/{quote(host, safe='')}")
    return client.get("/v1/hypervisors")
