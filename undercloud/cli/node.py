"""`undercloud node ...`: enrol machines, move them through their lifecycle, power them."""

from __future__ import annotations

import time
from pathlib import Path

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import InvalidInput, UndercloudError

COLUMNS = ["uuid", "name", "power_state", "provision_state", "maintenance", "instance_uuid"]
# where each verb leaves a node when its work succeeds
TARGET = {"manage": "manageable", "inspect": "manageable", "provide": "available", "clean": "manageable",
          "undeploy": "available"}
# mirrors provisioning.states.BUSY | WAIT (the CLI does not import the service's modules)
MOVING = {"verifying", "inspecting", "inspect wait", "cleaning", "clean wait", "deploying",
          "wait call-back", "deleting"}


@click.group()
def node() -> None:
    """Enrol machines and manage their lifecycle, power and boot device (like Ironic).

    A node is enrolled (`node import`), verified (`manage`: the BMC credentials are
    checked), optionally inspected (`inspect`: hardware read from the BMC), cleaned and made
    `available` (`provide`). The scheduler hands available nodes to servers. Verbs refused
    in a node's state name the verbs that are allowed.

    \b
    enroll -manage-> verifying -> manageable -inspect-> inspecting -> manageable
    manageable -provide-> cleaning -> available -(servers)-> deploying -> active
    """


def _wait(client: Client, idents: list[str], verb: str, timeout: float) -> list[dict]:
    """Follow nodes until they leave the busy/wait states; report progress on stderr."""
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    start = time.monotonic()
    pending = list(idents)
    done: dict[str, dict] = {}
    while pending:
        for ident in list(pending):
            n = client.get(f"/v1/nodes/{ident}")
            label = n["name"] or n["uuid"]
            if last.get(ident) != n["provision_state"]:
                last[ident] = n["provision_state"]
                note(f"{label}: {n['provision_state']} ({time.monotonic() - start:.1f} s)")
            if n["provision_state"] not in MOVING:
                done[ident] = n
                pending.remove(ident)
        if pending:
            if time.monotonic() > deadline:
                raise UndercloudError(f"timed out after {timeout:.0f} s waiting for {verb} of "
                                      f"{', '.join(pending)} (still {', '.join(last[p] for p in pending)})")
            time.sleep(0.5)
    failed = []
    for ident in idents:
        n = done[ident]
        want = TARGET.get(verb)
        if want and n["provision_state"] != want:
            failed.append(f"node {n['name'] or n['uuid']}: {verb} failed, now '{n['provision_state']}': "
                          f"{n['last_error'] or 'no error recorded'}")
    if failed:
        raise UndercloudError("\n".join(failed))
    return [done[i] for i in idents]


BATCH = 1000  # nodes per request (the service's limit): the service moves them in shared transactions


def _act(client: Client, idents: list[str], verb: str) -> list[dict]:
    """The verb for every node, in order; the first refusal stops there (an error)."""
    out: list[dict] = []
    for k in range(0, len(idents), BATCH):
        out += client.post("/v1/nodes/provision", json={"verb": verb, "nodes": idents[k:k + BATCH]})
    return out


def _verb_command(verb: str, help_text: str):
    @node.command(name=verb, help=help_text)
    @click.argument("nodes", nargs=-1, required=True)
    @click.option("--wait", is_flag=True, help="Wait until the nodes finish, showing progress on stderr.")
    @click.option("--timeout", default=1800.0, show_default=True, help="Seconds --wait waits.")
    @formatted(COLUMNS)
    def cmd(nodes: tuple[str, ...], wait: bool, timeout: float):
        client = Client()
        out = _act(client, list(nodes), verb)
        if wait:
            out = _wait(client, list(nodes), verb, timeout)
        return out

    return cmd


_verb_command("manage", "Verify the BMC credentials: enroll -> verifying -> manageable.\n\n"
              "A wrong password or unreachable BMC sends the node back to enroll with last_error set.")
_verb_command("inspect", "Read the hardware (CPUs, memory, disks, NICs) from the BMC: manageable -> manageable.")
_verb_command("provide", "Clean the nodes and make them available to servers: manageable -> available.")
_verb_command("clean", "Clean the nodes and keep them out of service: manageable -> manageable.")
_verb_command("abort", "Abort a node waiting for a call-back (inspect wait, clean wait, wait call-back).")
_verb_command("undeploy", "Tear down what a deploy left (media ejected, powered off), then clean: "
              "active, deploy failed or error -> available. Recovers a node whose deploy failed.")


@node.command(name="import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--provide", is_flag=True, help="Then manage and provide every imported node (waits).")
@click.option("--timeout", default=1800.0, show_default=True, help="Seconds --provide waits per step.")
@formatted(["uuid", "name", "driver", "provision_state", "ports"])
def import_(file: Path, provide: bool, timeout: float):
    """Enrol the nodes of a TripleO instackenv.json (or YAML) file.

    Each node: name, pm_type (redfish, ipmi, fake), pm_addr, pm_user, pm_password,
    pm_port, pm_system_id, ports [{address: MAC}] (or mac [..]), cpu, memory (MB), disk
    (GB), arch, capabilities ("profile:control,boot_option:local"), root_device,
    resource_class. Unknown fields and duplicates (name, MAC, BMC) are refused, one line
    each, and nothing is enrolled.
    """
    try:
        text = file.read_text()
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror}", str(file)) from None
    client = Client()
    nodes = client.post("/v1/nodes/import", json={"filename": str(file), "content": text})
    note(f"enrolled {len(nodes)} node(s) from {file}")
    if provide and nodes:
        ids = [n["uuid"] for n in nodes]
        for verb in ("manage", "provide"):
            _act(client, ids, verb)
            nodes = _wait(client, ids, verb, timeout)
    return nodes


@node.command(name="list")
@click.option("--state", "provision_state", help="Only nodes in this provision state.")
@click.option("--maintenance/--no-maintenance", default=None, help="Only nodes in (or out of) maintenance.")
@formatted(COLUMNS)
def list_(provision_state: str | None, maintenance: bool | None):
    """List nodes."""
    params = {k: v for k, v in (("provision_state", provision_state), ("maintenance", maintenance))
              if v is not None}
    return Client().get("/v1/nodes", params=params)


@node.command()
@click.argument("ident", metavar="NODE")
@formatted()
def show(ident: str):
    """Show one node (by name or UUID); the BMC password is masked."""
    return Client().get(f"/v1/nodes/{ident}")


@node.command()
@click.argument("ident", metavar="NODE")
@click.option("--limit", default=50, show_default=True)
@formatted(["at", "kind", "message"])
def events(ident: str, limit: int):
    """Show what happened to a node: state changes, power, drift, errors."""
    rows = Client().get(f"/v1/nodes/{ident}/events", params={"limit": limit})
    for r in rows:
        r["at"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["at"]))
    return rows


@node.command()
@click.argument("nodes", nargs=-1, required=True)
def delete(nodes: tuple[str, ...]):
    """Remove nodes from the inventory (in enroll, manageable, available or a failed state)."""
    client = Client()
    for n in nodes:
        client.delete(f"/v1/nodes/{n}")
        note(f"deleted node {n}")


@node.command()
@click.argument("action", type=click.Choice(["on", "off", "reboot"]))
@click.argument("nodes", nargs=-1, required=True)
@formatted(COLUMNS)
def power(action: str, nodes: tuple[str, ...]):
    """Power nodes on, off (hard) or reboot them through their BMC."""
    client = Client()
    return [client.post(f"/v1/nodes/{n}/power", json={"action": action}) for n in nodes]


@node.group(name="boot-device")
def boot_device() -> None:
    """Set the device a node boots from."""


@boot_device.command(name="set")
@click.argument("ident", metavar="NODE")
@click.argument("device", type=click.Choice(["pxe", "disk", "cd"]))
@click.option("--persistent", is_flag=True, help="Every boot, not only the next one.")
@formatted(COLUMNS)
def boot_set(ident: str, device: str, persistent: bool):
    """Boot NODE from DEVICE (pxe, disk or cd) at the next boot (or every boot)."""
    out = Client().put(f"/v1/nodes/{ident}/boot-device", json={"device": device, "persistent": persistent})
    note(f"{ident}: boots from {device} {'at every boot' if persistent else 'at the next boot'}")
    return out


@node.group()
def maintenance() -> None:
    """Put nodes in maintenance (the scheduler and power sync leave them alone) or back."""


@maintenance.command(name="set")
@click.argument("nodes", nargs=-1, required=True)
@click.option("--reason", help="Why (shown in node show).")
@formatted(COLUMNS)
def maintenance_set(nodes: tuple[str, ...], reason: str | None):
    """Put nodes in maintenance."""
    client = Client()
    return [client.put(f"/v1/nodes/{n}/maintenance", json={"reason": reason}) for n in nodes]


@maintenance.command(name="unset")
@click.argument("nodes", nargs=-1, required=True)
@formatted(COLUMNS)
def maintenance_unset(nodes: tuple[str, ...]):
    """Take nodes out of maintenance."""
    client = Client()
    return [client.delete(f"/v1/nodes/{n}/maintenance") for n in nodes]
