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
    undercloud lab up --cloud host --nodes 2   # empty servers of a cloud (`cloud add`) as nodes
    undercloud lab down --cloud host

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
@click.option("--boot-mode", type=click.Choice(["bios", "uefi"]), default="bios", show_default=True,
              help="The VMs' firmware: SeaBIOS, or OVMF (UEFI; the nodes get the capability boot_mode:uefi).")
@click.option("--cloud", help="Make the nodes empty servers of this cloud (`undercloud cloud add`) instead: "
                                "driver openstack, power through its Nova.")
@click.option("--flavor", help="--cloud: a flavor of the cloud (default: its own <instance>-lab, 1 vCPU, 1 GB).")
@click.option("--network", help="--cloud: a network of the cloud (default: its own <instance>-lab).")
@click.option("--image", help="--cloud: the boot image (default: its own blank disk <instance>-lab-empty).")
@formatted()
def up(count: int, bmc: str, memory: int, disk: int, boot_mode: str, cloud: str | None, flavor: str | None,
       network: str | None, image: str | None):
    """Create the lab: N empty VMs (powered off), their BMCs, and an instackenv.json.

    With --cloud: N empty servers of that cloud (ACTIVE, nothing to boot), and what they
    need where not given (a flavor, a network, a blank image, named after this home's
    instance); the instackenv.json names each by cloud and server id (pm_type openstack).
    Run again, it makes only the servers that are missing."""
    from undercloud.lab.lab import Lab

    if cloud and boot_mode != "bios":
        raise click.UsageError("--boot-mode uefi is for the lab's own VMs, not with --cloud")
    if cloud:
        return _cloud_up(cloud, count, flavor, network, image)
    if flavor or network or image:
        raise click.UsageError("--flavor, --network and --image go with --cloud")
    status = Lab().up(count, bmc, memory, disk, boot_mode)
    note(f"lab up: {count} {boot_mode.upper()} node(s) behind {bmc} BMCs; enrol them with:\n"
         f"  undercloud node import {status['instackenv']}")
    return _flat(status)


@lab.command()
@formatted()
def status():
    """Show the lab: namespace, bridge, BMCs, KVM or TCG (and why), each VM's libvirt state."""
    from undercloud.lab.lab import Lab

    return _flat(Lab().status())


@lab.command()
@click.option("--cloud", help="Remove the lab `lab up --cloud` made in this cloud instead.")
def down(cloud: str | None):
    """Remove everything `lab up` made: BMC processes, domains, disks, bridge, namespace
    (--cloud: the servers, and the flavor, network and image it made there)."""
    from undercloud.lab.lab import Lab

    if cloud:
        from undercloud.cli.client import Client

        removed = Client(timeout=900).delete(f"/v1/clouds/{cloud}/lab")["removed"]
    else:
        removed = Lab().down()
    for item in removed:
        note(f"removed {item}")
    note("lab down" if removed else "no lab to remove")


def _cloud_up(cloud: str, count: int, flavor, network, image) -> dict:
    import json

    from undercloud.cli.client import Client
    from undercloud.config import Home

    note(f"lab up in cloud {cloud}: {count} server(s); waiting for them to be ACTIVE")
    out = Client(timeout=900).post(f"/v1/clouds/{cloud}/lab", json={"nodes": count, "flavor": flavor,
                                                                   "network": network, "image": image})
    path = Home.current().path / "lab" / f"cloud-{cloud}-instackenv.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out["instackenv"], indent=2) + "\n")
    for item in out["made"]:
        note(f"made {item}")
    note(f"lab up: {len(out['instackenv']['nodes'])} node(s) in cloud {cloud}; enrol them with:\n"
         f"  undercloud node import {path}")
    return {"cloud": cloud, "instackenv": str(path),
            "nodes": [n["name"] + " " + n["server"] for n in out["instackenv"]["nodes"]]}


def _flat(status: dict) -> dict:
    out = dict(status)
    if "nodes" in out:
        out["nodes"] = [f"{d['name']} {d['mac']} {d['state']}" for d in out["nodes"]]
    return out
