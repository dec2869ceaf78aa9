"""The kinds of server the provisioning layer realises, by name: one `Realiser` subclass per
type in provisioning/servers/ declares its `hypervisor_type` with one of these. They are
spelt here, with the standard library only, because layers that may not import the
realisers use them too (the CLI's choices, image and flavor checks, the overcloud's plan);
tests/unit/test_server_types.py checks that the realisers declare exactly ALL, and that the
groups below are what the realisers' own attributes say."""

from __future__ import annotations

BAREMETAL = "baremetal"
VM = "vm"
CONTAINER = "container"
OPENSTACK = "openstack"  # servers of another OpenStack cloud (`openstack:<cloud>`)

ALL = (BAREMETAL, VM, CONTAINER, OPENSTACK)
# The types images and the undercloud's flavors are made for, in the order messages list them
# (openstack servers run the VM images, on their cloud's flavors: its realiser is `remote`).
HYPERVISOR_TYPES = (BAREMETAL, VM, CONTAINER)
