"""The server types are the realisers' own: each Realiser declares its `hypervisor_type`
with a name of undercloud/server_types.py (spelt there for the layers that may not import
the realisers: the CLI, images, the overcloud), and the groups that module and the servers
service keep are what the realisers' attributes say."""

from __future__ import annotations

from undercloud import server_types
from undercloud.provisioning.servers.base import realisers
from undercloud.provisioning.servers.placement import LOCAL_TYPES


def test_the_realisers_declare_exactly_the_named_types():
    found = realisers()
    assert set(found) == set(server_types.ALL)
    assert len(set(server_types.ALL)) == len(server_types.ALL)


def test_the_groups_are_what_the_realisers_say():
    found = realisers()
    # images and the undercloud's flavors: every type but those another cloud places
    assert set(server_types.HYPERVISOR_TYPES) == {t for t, cls in found.items() if not cls.remote}
    # a worker's own host: neither placed on a node nor by another cloud
    assert set(LOCAL_TYPES) == {t for t, cls in found.items() if not cls.remote and not cls.uses_nodes}
    assert all(cls.image_hypervisor_type in ("", *server_types.HYPERVISOR_TYPES) for cls in found.values())
