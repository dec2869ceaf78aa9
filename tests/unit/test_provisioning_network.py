"""The provisioning network of undercloud.conf (provisioning/network.py): TripleO's keys,
checked with one line per mistake, against this host's own loopback interface."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from undercloud.config import Home
from undercloud.errors import InvalidInput
from undercloud.provisioning.network import configured

GOOD = """\
[DEFAULT]
local_interface = lo
local_ip = 127.0.0.1/8    # loopback stands in for eth1 here
undercloud_hostname = uc.example.com
[ctlplane-subnet]
cidr = 127.0.0.0/8
dhcp_start = 127.0.0.100
dhcp_end = 127.0.0.120
gateway = 127.0.0.254
inspection_iprange = 127.0.0.130,127.0.0.140
"""


def home_with(tmp_path, text: str | None) -> Home:
    home = Home(tmp_path / "uc").ensure()
    if text is not None:
        (home.path / "undercloud.conf").write_text(text)
    return home


def test_without_a_local_interface_the_lab_is_the_provisioning_network(tmp_path):
    assert configured(home_with(tmp_path, None)) is None
    assert configured(home_with(tmp_path, "[DEFAULT]\nundercloud_hostname = x\n")) is None


def test_a_configured_network_is_read_as_tripleo_writes_it(tmp_path):
    net = configured(home_with(tmp_path, GOOD))
    assert (net.interface, net.address, net.cidr, net.prefix, net.gateway, net.netns) == \
        ("lo", "127.0.0.1", "127.0.0.0/8", 8, "127.0.0.254", None)
    assert net.pool[0] == "127.0.0.100" and net.pool[-1] == "127.0.0.120" and len(net.pool) == 21
    assert net.virtual_ips == ("127.0.0.250", "127.0.0.251", "127.0.0.252", "127.0.0.253")
    assert net.key == "provisioning-lo"
    # nodes being inspected get addresses of their own (TripleO's inspection_iprange)
    assert net.inspection_pool == tuple(f"127.0.0.{h}" for h in range(130, 141))
    assert configured(home_with(tmp_path, GOOD.replace("inspection_iprange", "# inspection_iprange"))) \
        .inspection_pool == ()  # not given: inspection takes from the DHCP range


def test_inspection_takes_its_addresses_from_the_inspection_range(tmp_path):
    from undercloud.provisioning.servers.vm_net import Addresses
    from undercloud.store.addresses import AddressTable
    from undercloud.store.db import Store

    home = home_with(tmp_path, GOOD)
    net = configured(home)
    table = AddressTable(Store(f"sqlite:///{tmp_path / 'uc.db'}", tmp_path / "store.key").create_schema())
    assert Addresses(home, net.address, table, net, inspection=True).take("inspect-n1") == "127.0.0.130"
    assert Addresses(home, net.address, table, net).take("server-1") == "127.0.0.100"
    assert Addresses(home, net.address, table, net, inspection=True).take("inspect-n2") == "127.0.0.131"


@pytest.mark.parametrize("change, says", [
    (("local_interface = lo", "local_interface = nosuch0"), "[DEFAULT] local_interface: no interface 'nosuch0'"),
    (("local_interface = lo", "local_interface = ../lo"), "[DEFAULT] local_interface: no interface '../lo'"),
    (("local_ip = 127.0.0.1/8", "local_ip = banana"), "[DEFAULT] local_ip: 'banana' is not an address with a prefix"),
    (("local_ip = 127.0.0.1/8", "local_ip = 127.0.0.1"), "[DEFAULT] local_ip: 127.0.0.1/32 has no prefix"),
    (("local_ip = 127.0.0.1/8", "local_ip = 127.0.0.2/8"), "[DEFAULT] local_ip: 127.0.0.2/8 is not on lo"),
    (("cidr = 127.0.0.0/8", "cidr = 10.0.0.0/24"), "[DEFAULT] local_ip: 127.0.0.1/8 is not in cidr 10.0.0.0/24"),
    (("cidr = 127.0.0.0/8", "cidr = 127.0.0.0/33"), "[ctlplane-subnet] cidr: '127.0.0.0/33' is not a network"),
    (("[ctlplane-subnet]", "[other]"), "no [ctlplane-subnet] section"),
    (("dhcp_start = 127.0.0.100\n", ""), "[ctlplane-subnet] dhcp_start: missing"),
    (("dhcp_end = 127.0.0.120", "dhcp_end = 10.1.1.1"), "[ctlplane-subnet] dhcp_end: 10.1.1.1 is not a host address of"),
    (("dhcp_end = 127.0.0.120", "dhcp_end = 127.0.0.50"), "dhcp_end: 127.0.0.50 comes before dhcp_start 127.0.0.100"),
    (("dhcp_end = 127.0.0.120", "dhcp_end = 127.0.0.x"), "[ctlplane-subnet] dhcp_end: '127.0.0.x' is not an IP address"),
    (("gateway = 127.0.0.254", "gateway = 127.0.0.110"), "the range 127.0.0.100-127.0.0.120 holds the gateway"),
    (("dhcp_start = 127.0.0.100", "dhcp_start = 127.0.0.1"), "the range 127.0.0.1-127.0.0.120 holds the local_ip"),
    (("[ctlplane-subnet]", "[ctlplane-subnet"), "undercloud.conf: "),
    (("127.0.0.130,127.0.0.140", "127.0.0.130"), "inspection_iprange: '127.0.0.130' is not two addresses"),
    (("127.0.0.130,127.0.0.140", "127.0.0.130,x"), "inspection_iprange: '127.0.0.130,x' is not two addresses"),
    (("127.0.0.130,127.0.0.140", "127.0.0.140,127.0.0.130"), "inspection_iprange: 127.0.0.130 comes before"),
    (("127.0.0.130,127.0.0.140", "127.0.0.110,127.0.0.140"), "inspection_iprange: 127.0.0.110-127.0.0.140 "
                                                           "overlaps the DHCP range 127.0.0.100-127.0.0.120"),
    (("127.0.0.130,127.0.0.140", "127.0.0.90,127.0.0.100"), "overlaps the DHCP range"),
    (("127.0.0.130,127.0.0.140", "127.0.0.130,10.0.0.1"), "inspection_iprange: 10.0.0.1 is not a host address"),
    (("127.0.0.130,127.0.0.140", "127.0.0.250,127.0.0.255"), "inspection_iprange: the range 127.0.0.250-127.0.0.255 "
                                                           "holds the gateway 127.0.0.254"),
])
def test_each_mistake_is_one_line_naming_the_key(tmp_path, change, says):
    old, new = change
    assert old in GOOD
    with pytest.raises(InvalidInput) as err:
        configured(home_with(tmp_path, GOOD.replace(old, new, 1)))
    assert says in err.value.message and "\n" not in err.value.message
    assert err.value.message.startswith("undercloud.conf")


def test_the_service_does_not_start_on_a_mistake_and_says_which(uc_home):
    (uc_home.path).mkdir(parents=True, exist_ok=True)
    (uc_home.path / "undercloud.conf").write_text(GOOD.replace("dhcp_end = 127.0.0.120", "dhcp_end = 127.0.0.50"))
    r = run_cli("service", "start", "-f", "json", timeout=120)
    assert r.returncode != 0
    assert "undercloud.conf: [ctlplane-subnet] dhcp_end: 127.0.0.50 comes before dhcp_start 127.0.0.100" in r.stderr
    assert "Traceback" not in r.stderr
    (uc_home.path / "undercloud.conf").write_text(GOOD)
    r = run_cli("service", "start", "-f", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    info = run_cli("server", "hypervisors", "-f", "json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)
