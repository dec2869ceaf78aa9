"""The address table (store/addresses.py): claims the database decides, on SQLite and (with
UNDERCLOUD_TEST_STORE=postgresql, scripts/test's postgresql tier) PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import own_store_url
from undercloud.store import Store
from undercloud.store.addresses import AddressTable, AddressTaken, NoFreeAddress

NET = "uc1-lab"
POOL = [f"10.9.0.{n}" for n in range(2, 42)]


@pytest.fixture
def table(tmp_path):
    return AddressTable(Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema())


def test_many_threads_claiming_at_once_get_distinct_addresses(table):
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: table.claim(NET, f"s{i}", POOL), range(len(POOL))))
    assert sorted(got) == sorted(POOL)
    assert table.on(NET) == {a: f"s{i}" for i, a in enumerate(got)}


def test_a_holder_keeps_its_address_and_gives_it_back(table):
    a = table.claim(NET, "s1", POOL)
    assert a == POOL[0] and table.claim(NET, "s1", POOL) == a  # a repeated create, a rebuild
    assert table.claim(NET, "s2", POOL) == POOL[1]
    assert table.held("s1") == (NET, a)
    assert table.release("s1") == [a] and table.release("s1") == [] and table.held("s1") is None
    assert table.claim(NET, "s3", POOL) == a  # freed addresses are handed out again
    # Networks are apart: the same address on another network is free.
    assert table.claim("other", "s4", POOL) == a


def test_the_candidates_run_out_with_an_error_naming_their_holders(table):
    for i, _ in enumerate(POOL[:3]):
        table.claim(NET, f"s{i}", POOL[:3])
    with pytest.raises(NoFreeAddress, match=r"no free address on uc1-lab \(3 held\)") as e:
        table.claim(NET, "one-more", POOL[:3])
    assert e.value.held == {POOL[0]: "s0", POOL[1]: "s1", POOL[2]: "s2"}
    assert table.held("one-more") is None


def test_an_exact_claim_of_a_held_address_is_refused_and_takes_nothing(table):
    assert table.claim(NET, "s1", exact="10.9.0.10") == "10.9.0.10"
    assert table.claim(NET, "s1", exact="10.9.0.10") == "10.9.0.10"  # its own: again
    mine = table.claim(NET, "s2", POOL)
    with pytest.raises(AddressTaken, match="10.9.0.10 on uc1-lab is held by s1") as e:
        table.claim(NET, "s2", exact="10.9.0.10")
    assert e.value.holder == "s1"
    assert table.held("s2") == (NET, mine)  # a refused claim left it what it had
    # A claim that moves a holder gives the old address back in the same step.
    assert table.claim(NET, "s2", exact="10.9.0.20") == "10.9.0.20"
    assert table.on(NET) == {"10.9.0.10": "s1", "10.9.0.20": "s2"}


def test_threads_racing_for_one_exact_address_one_wins(table):
    def take(i):
        try:
            return table.claim(NET, f"s{i}", exact="10.9.0.7")
        except AddressTaken:
            return None

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(take, range(16)))
    assert got.count("10.9.0.7") == 1 and got.count(None) == 15
    assert list(table.on(NET)) == ["10.9.0.7"]


def test_adopt_records_what_the_old_allocators_held_once(table):
    assert table.adopt(NET, "s1", "10.9.0.5")
    assert not table.adopt(NET, "s2", "10.9.0.5")  # another's already
    assert not table.adopt(NET, "s1", "10.9.0.6")  # s1 holds one already
    assert table.on(NET) == {"10.9.0.5": "s1"}
    assert table.claim(NET, "s1", POOL[:10]) == "10.9.0.5"


def test_the_lab_addresses_file_of_an_older_home_is_imported_once(table, tmp_path):
    import json

    from undercloud.config import Home
    from undercloud.provisioning.servers.base import RealiserError
    from undercloud.provisioning.servers.vm_net import Addresses

    home = Home(tmp_path / "uc")
    old = home.path / "servers" / "lab-addresses.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"192.168.77.100": "s1", "192.168.77.10": "s2"}))
    addrs = Addresses(home, "192.168.77.1", table)
    assert addrs.held() == {"192.168.77.10": "s2", "192.168.77.100": "s1"}
    assert not old.exists() and old.with_suffix(".json.imported").exists()
    assert addrs.take("s3") == "192.168.77.101"  # never one an older create holds
    assert addrs.take("s1") == "192.168.77.100" and addrs.take("s2") == "192.168.77.10"
    with pytest.raises(RealiserError, match=r"fixed_ip 192.168.77.100 is held by server s1"):
        addrs.take("s4", "192.168.77.100")
    # An overcloud's VIP on the lab network is no server's: the network may go without it.
    table.claim(addrs.network, "vip:overcloud", ["192.168.77.250"])
    assert addrs.held() == {"192.168.77.10": "s2", "192.168.77.100": "s1", "192.168.77.101": "s3"}


def test_ports_and_servers_on_one_address_space_never_share_an_address(table):
    """A network naming an address space (the ctlplane: the lab network's key) keeps its
    ports' addresses in the table beside the servers' and the VIPs': neither takes the other's."""
    from undercloud.errors import Conflict
    from undercloud.store import networks as ipam

    store = table.store
    with store.session() as s:
        ipam.ensure_network(s, "00000000-0000-4000-8000-000000000001", "ctlplane", "10.9.0.0/24", "10.9.0.1",
                            [{"start": "10.9.0.2", "end": "10.9.0.41"}], {ipam.ADDRESS_SPACE: NET})
    assert table.claim(NET, "server-1", POOL) == "10.9.0.2"
    with store.session() as s:
        port = ipam.create_port(s, "ctlplane", "p", None, None, {})
    assert [f["ip_address"] for f in port["fixed_ips"]] == ["10.9.0.3"]  # past the server's
    with store.session() as s, pytest.raises(Conflict, match=r"^address 10.9.0.2 is already in use \(server server-1\)$"):
        ipam.create_port(s, "ctlplane", "q", [{"ip_address": "10.9.0.2"}], None, {})
    with pytest.raises(AddressTaken, match=f"10.9.0.3 on {NET} is held by port:{port['id']}/10.9.0.3"):
        table.claim(NET, "server-2", exact="10.9.0.3")
    assert table.claim(NET, "server-2", POOL) == "10.9.0.4"
    with store.session() as s:  # a port holding two addresses, given back at once
        two = ipam.create_port(s, "ctlplane", "r", [{"ip_address": "10.9.0.9"}, {"ip_address": "10.9.0.10"}], None, {})
    assert {a: h for a, h in table.on(NET).items() if h.startswith("port:")} == {
        "10.9.0.3": f"port:{port['id']}/10.9.0.3", "10.9.0.9": f"port:{two['id']}/10.9.0.9",
        "10.9.0.10": f"port:{two['id']}/10.9.0.10"}
    with store.session() as s:
        ipam.delete_port(s, two["id"])
        ipam.delete_port(s, port["id"])
    assert table.on(NET) == {"10.9.0.2": "server-1", "10.9.0.4": "server-2"}


def test_the_ports_addresses_of_an_older_store_move_into_the_table_and_back(tmp_path):
    """Revision 0016: port_addresses' rows become the table's (`subnet:<id>`), each port's
    addresses still its own; a downgrade puts them back."""
    from sqlalchemy import text

    from undercloud.store import migrate
    from undercloud.store import networks as ipam

    store = Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema()
    migrate.downgrade(store, "0015")
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO networks (id, name, properties, mtu, created_at) VALUES ('n1', 'net', '{}', 1500, 0)"))
        c.execute(text("INSERT INTO subnets (id, network_id, name, cidr, ip_version, gateway_ip, allocation_pools, "
                       "properties, created_at) VALUES ('s1', 'n1', 'sub', '10.7.0.0/24', 4, '10.7.0.1', "
                       "'[{\"start\": \"10.7.0.10\", \"end\": \"10.7.0.20\"}]', '{}', 0)"))
        c.execute(text("INSERT INTO network_ports (id, network_id, name, mac_address, properties, created_at) "
                       "VALUES ('p1', 'n1', 'a', 'fa:16:3e:00:00:01', '{}', 0)"))
        c.execute(text("INSERT INTO port_addresses (subnet_id, ip_address, port_id) VALUES ('s1', '10.7.0.10', 'p1')"))
    assert migrate.upgrade(store) == "0015"
    assert AddressTable(store).on("subnet:s1") == {"10.7.0.10": "port:p1/10.7.0.10"}
    with store.session() as s:
        assert ipam.port_dict(s, s.get(ipam.NetworkPort, "p1"))["fixed_ips"] == [
            {"subnet_id": "s1", "ip_address": "10.7.0.10"}]
        assert [f["ip_address"] for f in ipam.create_port(s, "net", "b", None, None, {})["fixed_ips"]] == ["10.7.0.11"]
    migrate.downgrade(store, "0015")
    with store.engine.connect() as c:
        assert sorted(c.execute(text("SELECT subnet_id, ip_address, port_id FROM port_addresses")).all()) == [
            ("s1", "10.7.0.10", "p1"), ("s1", "10.7.0.11", next(iter(
                c.execute(text("SELECT id FROM network_ports WHERE name = 'b'")).scalars())))]
        assert c.execute(text("SELECT count(*) FROM addresses")).scalar() == 0
