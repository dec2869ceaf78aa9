"""Lab networks spanning hosts (store/lab_networks.py): what the hosts agree on, on SQLite and
(with UNDERCLOUD_TEST_STORE=postgresql, scripts/test's postgresql tier) PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import own_store_url
from undercloud.store import Store
from undercloud.store.lab_networks import LabNetworks, vni


@pytest.fixture
def nets(tmp_path):
    return LabNetworks(Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema())


def test_a_network_is_defined_once_by_the_first_host_and_racing_definitions_agree(nets):
    with ThreadPoolExecutor(6) as pool:
        rows = list(pool.map(lambda i: nets.define("uc1-lab", f"10.{i}.0.0/24", f"10.{i}.0.1", f"host-{i}"),
                             range(6)))
    assert all(r == rows[0] for r in rows)  # every racer got the one stored definition
    assert nets.get("uc1-lab") == rows[0] and rows[0]["name"] == "uc1-lab"
    first = rows[0]["host"]
    assert rows[0]["subnet"] == f"10.{first.split('-')[1]}.0.0/24"
    # defined again (the first host restarted, another host with another subnet): unchanged
    assert nets.define("uc1-lab", "10.99.0.0/24", "10.99.0.1", "host-x") == rows[0]
    assert nets.get("nothing") is None


def test_members_say_where_their_tunnels_end_and_a_retired_host_leaves(nets):
    nets.define("uc1-lab", "10.9.0.0/24", "10.9.0.1", "a")
    nets.join("uc1-lab", "a", "192.168.24.254", "10.9.0.1")
    nets.join("uc1-lab", "b", None, "10.9.0.254")  # not reachable yet
    nets.join("uc1-lab", "b", "192.168.24.107", "10.9.0.254")  # again, reachable now: updated, not doubled
    nets.join("other-lab", "b", "192.168.24.107", "10.7.0.254")
    assert nets.members("uc1-lab") == [{"host": "a", "endpoint": "192.168.24.254", "address": "10.9.0.1"},
                                       {"host": "b", "endpoint": "192.168.24.107", "address": "10.9.0.254"}]
    nets.leave("b")
    assert [m["host"] for m in nets.members("uc1-lab")] == ["a"] and nets.members("other-lab") == []


def test_every_host_derives_the_same_vxlan_id_in_range():
    ids = {vni(f"uc{i:06x}-lab") for i in range(2000)}
    assert vni("uc1-lab") == vni("uc1-lab") and len(ids) > 1990
    assert all(1 <= i < 2**24 - 1 for i in ids)
