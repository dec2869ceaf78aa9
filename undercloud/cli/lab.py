"""`undercloud lab ...`: the virtual lab (empty VMs with virtual BMCs, to enrol as nodes).

The lab stands in for a rack, not for the undercloud: it runs here in the CLI (as root)
and leaves the BMC processes running in the background, like machines in a rack; the
undercloud service only ever talks to it through the BMCs.
"""

from __future__ import annotations

import click

from undercloud.cli.output import formatted, note


@click.group()
def lab() -> None:
    """The virtual lab: libvirt VMs with virtual BMCs (Redfish or IPMI) to enrol as nodes.

    \b
    undercloud lab up --nodes 2            # VMs + BMCs + lab network, writes instackenv.json
    undercloud node import $UNDERCLOUD_HOME/lab/instackenv.json
    undercloud node manage --wait NODE...  # the undercloud checks each BMC's credentials
    undercloud lab down                    # removes everything `up` made

    VMs use software emulation (TCG) unless a short probe boot shows KVM works here
    (UNDERCLOUD_ACCEL=kvm|qemu overrides; `lab status` shows which and why). Everything is
    named after this home's instance, so two homes can each run a lab.
    """


@lab.command()
@click.option("--nodes", "count", type=int, default=2, show_default=True, help="How many VMs.")
@click.option("--bmc", type=click.Choice(["redfish", "ipmi"]), default="redfish", show_default=True,
              help="redfish: one sushy-tools emulator for all; ipmi: a pyghmi BMC per node.")
@click.option("--memory", type=int, default=512, show_default=True, help="MB of RAM per VM.")
@click.option("--disk", type=int, default=10, show_default=True, help="GB of (sparse qcow2) disk per VM.")
@formatted()
def up(count: int, bmc: str, memory: int, disk: int):
    """Create the lab: N empty VMs (powered off), their BMCs, and an instackenv.json."""
    from undercloud.lab.lab import Lab

    status = Lab().up(count, bmc, memory, disk)
    note(f"lab up: {count} node(s) behind {bmc} BMCs; enrol them with:\n"
         f"  undercloud node import {status['instackenv']}")
    return _flat(status)


@lab.command()
@formatted()
def status():
    """Show the lab: namespace, bridge, BMCs, KVM or TCG (and why), each VM's libvirt state."""
    from undercloud.lab.lab import Lab

    return _flat(Lab().status())


@lab.command()
def down():
    """Remove everything `lab up` made: BMC processes, domains, disks, bridge, namespace."""
    from undercloud.lab.lab import Lab

    removed = Lab().down()
    for item in removed:
        note(f"removed {item}")
    note("lab down" if removed else "no lab to remove")


def _flat(status: dict) -> dict:
    out = dict(status)
    if "nodes" in out:
        out["nodes"] = [f"{d['name']} {d['mac']} {d['state']}" for d in out["nodes"]]
    return out
