"""The provisioning network: where bare-metal nodes boot the deploy ramdisk and reach the
undercloud.

By default it is the virtual lab's network (host/labnet.py, made when first needed): the
lab's namespace and bridge, the undercloud at .1, nodes at .100-.249. For real racks it is
configured in `<home>/undercloud.conf`, with TripleO's names for it:

    [DEFAULT]
    local_interface = eth1            # this host's interface on the provisioning network
    local_ip = 192.168.24.1/24        # the undercloud's address there (on that interface)
    local_subnet = ctlplane-subnet    # the section below (this default when left out)

    [ctlplane-subnet]
    cidr = 192.168.24.0/24
    dhcp_start = 192.168.24.5         # nodes get addresses from dhcp_start to dhcp_end
    dhcp_end = 192.168.24.24
    gateway = 192.168.24.254          # the nodes' router (optional; none by default)
    inspection_iprange = 192.168.24.100,192.168.24.120   # nodes being inspected (optional;
                                      # the DHCP range by default)

Other keys of a TripleO undercloud.conf are left alone. It is read when the service starts,
and any mistake stops the start with one line naming the key (`configured`).
"""

from __future__ import annotations

import configparser
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from undercloud.errors import InvalidInput
from undercloud.host.labnet import SERVER_HOSTS, VIP_HOSTS
from undercloud.host.run import run

CONFIG = "undercloud.conf"


@dataclass(frozen=True)
class ProvisioningNetwork:
    key: str                  # its name in the store's address table
    netns: str | None         # the namespace its interface is in (None: the service's own)
    interface: str
    address: str              # the undercloud's address on it
    cidr: str
    pool: tuple[str, ...]     # the addresses nodes get
    gateway: str | None       # the nodes' router, if any (deployed nodes' default route)
    virtual_ips: tuple[str, ...]
    inspection_pool: tuple[str, ...] = ()  # the addresses nodes being inspected get (empty: `pool`)

    @property
    def prefix(self) -> int:
        return ipaddress.ip_network(self.cidr).prefixlen

    def info(self) -> dict:
        """What a realiser's `network_info()` tells: address-table key, subnet, the
        undercloud's address, the VIP candidates."""
        return {"network": self.key, "subnet": self.cidr, "gateway": self.address, "virtual_ips": list(self.virtual_ips)}


def config_file(home) -> Path:
    return Path(home.path) / CONFIG


def configured(home) -> ProvisioningNetwork | None:
    """The provisioning network of `<home>/undercloud.conf`, checked; None when the file
    names none (no local_interface): the lab's is used. Raises InvalidInput, one line."""
    path = config_file(home)
    if not path.exists():
        return None
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    try:
        parser.read_string(path.read_text(), source=str(path))
    except (configparser.Error, UnicodeDecodeError, OSError) as exc:
        raise InvalidInput(f"{CONFIG}: {' '.join(str(exc).split())}", CONFIG) from None
    d = parser.defaults()
    if not d.get("local_interface"):
        return None

    def bad(section: str, key: str, why: str) -> InvalidInput:
        return InvalidInput(f"{CONFIG}: [{section}] {key}: {why}", f"{CONFIG} [{section}] {key}")

    interface = d["local_interface"].strip()
    if "/" in interface or not Path(f"/sys/class/net/{interface}").exists():
        raise bad("DEFAULT", "local_interface", f"no interface {interface!r} on this host")
    try:
        local = ipaddress.ip_interface(d.get("local_ip", "").strip())
    except ValueError:
        raise bad("DEFAULT", "local_ip", f"{d.get('local_ip', '')!r} is not an address with a prefix "
                                         "(like 192.168.24.1/24)") from None
    if local.network.prefixlen == local.max_prefixlen:
        raise bad("DEFAULT", "local_ip", f"{local} has no prefix (like 192.168.24.1/24)")
    section = d.get("local_subnet", "ctlplane-subnet").strip()
    if not parser.has_section(section):
        raise InvalidInput(f"{CONFIG}: no [{section}] section (local_subnet)", CONFIG)
    s = parser[section]

    def address(key: str, required: bool = True) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        text = s.get(key, "").strip()
        if not text:
            if required:
                raise bad(section, key, "missing")
            return None
        try:
            return ipaddress.ip_address(text)
        except ValueError:
            raise bad(section, key, f"{text!r} is not an IP address") from None

    try:
        cidr = ipaddress.ip_network(s.get("cidr", "").strip())
    except ValueError:
        raise bad(section, "cidr", f"{s.get('cidr', '')!r} is not a network (like 192.168.24.0/24)") from None
    if local.network != cidr:
        raise bad("DEFAULT", "local_ip", f"{local} is not in cidr {cidr}")
    start, end, gateway = address("dhcp_start"), address("dhcp_end"), address("gateway", required=False)
    hosts = (cidr.network_address, cidr.broadcast_address)
    for key, ip in (("dhcp_start", start), ("dhcp_end", end), ("gateway", gateway)):
        if ip is not None and (ip not in cidr or ip in hosts):
            raise bad(section, key, f"{ip} is not a host address of cidr {cidr}")
    if int(start) > int(end):
        raise bad(section, "dhcp_end", f"{end} comes before dhcp_start {start}")
    for name, ip in (("local_ip", local.ip), ("gateway", gateway)):
        if ip is not None and int(start) <= int(ip) <= int(end):
            raise bad(section, "dhcp_start", f"the range {start}-{end} holds the {name} {ip}")
    inspection = _inspection_range(s.get("inspection_iprange", "").strip(), cidr, (start, end),
                                   (("local_ip", local.ip), ("gateway", gateway)),
                                   lambda why: bad(section, "inspection_iprange", why))
    addrs = run(["ip", "-o", "addr", "show", "dev", interface], check=False, timeout=10).stdout
    if f" {local} " not in addrs:
        raise bad("DEFAULT", "local_ip", f"{local} is not on {interface} (ip addr add {local} dev {interface})")
    pool = tuple(str(ipaddress.ip_address(i)) for i in range(int(start), int(end) + 1))
    taken = set(pool) | set(inspection) | {str(local.ip), str(gateway)}
    vips = tuple(str(cidr.network_address + n) for n in VIP_HOSTS
                 if n < cidr.num_addresses - 1 and str(cidr.network_address + n) not in taken)
    return ProvisioningNetwork(key=f"provisioning-{interface}", netns=None, interface=interface,
                               address=str(local.ip), cidr=str(cidr), pool=pool,
                               gateway=str(gateway) if gateway else None, virtual_ips=vips,
                               inspection_pool=inspection)


def _inspection_range(text: str, cidr, dhcp: tuple, held: tuple, bad) -> tuple[str, ...]:
    """TripleO's `inspection_iprange` (`start,end`): its own addresses, in the subnet, apart
    from the DHCP range and from the addresses in `held` ((name, address) pairs)."""
    if not text:
        return ()
    parts = [x.strip() for x in text.split(",")]
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = (ipaddress.ip_address(x) for x in parts)
    except ValueError:
        raise bad(f"{text!r} is not two addresses (start,end)") from None
    hosts = (cidr.network_address, cidr.broadcast_address)
    for ip in (start, end):
        if ip not in cidr or ip in hosts:
            raise bad(f"{ip} is not a host address of cidr {cidr}")
    if int(start) > int(end):
        raise bad(f"{end} comes before {start}")
    if int(start) <= int(dhcp[1]) and int(dhcp[0]) <= int(end):
        raise bad(f"{start}-{end} overlaps the DHCP range {dhcp[0]}-{dhcp[1]}")
    for name, ip in held:
        if ip is not None and int(start) <= int(ip) <= int(end):
            raise bad(f"the range {start}-{end} holds the {name} {ip}")
    return tuple(str(ipaddress.ip_address(i)) for i in range(int(start), int(end) + 1))


def lab_network_info(home) -> dict:
    """`Realiser.network_info()` of VM servers: the lab network, made if missing, and the
    addresses it keeps for virtual IPs (bare-metal servers: their provisioning network's)."""
    from undercloud.provisioning.servers.vm_net import lab_network

    return lab(home, lab_network(home)).info()


def lab(home, made: tuple[str, str, str]) -> ProvisioningNetwork:
    """The virtual lab's network as the provisioning network; `made`: (netns, bridge, the
    undercloud's address) from servers/vm_net.lab_network, which makes it when missing."""
    from undercloud.provisioning.servers.vm_net import PREFIX, lab_network_key

    ns, bridge, gateway = made
    cidr = ipaddress.ip_interface(f"{gateway}/{PREFIX}").network
    return ProvisioningNetwork(key=lab_network_key(home), netns=ns, interface=bridge, address=gateway,
                               cidr=str(cidr), pool=tuple(str(cidr.network_address + h) for h in SERVER_HOSTS),
                               gateway=None, virtual_ips=tuple(str(cidr.network_address + h) for h in VIP_HOSTS))
