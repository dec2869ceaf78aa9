"""`undercloud lab ...`: the virtual lab (VMs with virtual BMCs)."""

from __future__ import annotations

import click


@click.group()
def lab() -> None:
    """The virtual lab: libvirt VMs with virtual BMCs (Redfish or IPMI) to enrol as nodes."""
