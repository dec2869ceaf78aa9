"""Address bookkeeping for the Neutron types templates use (OS::Neutron::Net, Subnet, Port),
as TripleO used Neutron for its control plane's IPAM: networks, their subnets, and ports
holding a unique MAC address and fixed IPs from the subnets' allocation pools. Nothing is
wired here (no bridge, no DHCP): it is the record of who holds which address.

A port's addresses are rows of the one address table (store/addresses.py), held by
`port:<id>/<address>`, on their subnet's key (`address_key`): `subnet:<id>`, or the address
space its network names (the undercloud's ctlplane: the lab network's key, which the VM and
bare-metal servers and the virtual IPs also take theirs from, so a port never gets a
server's address). An address is unique on its key and a MAC address unique overall: the
tables say so (primary key, unique index), so two stacks allocating at once cannot get the
same one.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
import uuid
from typing import Any

from sqlalchemy import Float, Integer, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from undercloud.errors import Conflict, InvalidInput, NotFound, UndercloudError
from undercloud.store.addresses import PORT, Address, holder_words, port_holder, port_prefix
from undercloud.store.db import Base

MAC_PREFIX = "fa:16:3e"  # Neutron's default base_mac
ADDRESS_SPACE = "address_space"  # a network's property: the address table's key of all its subnets


class Network(Base):
    __tablename__ = "networks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), index=True, default="")
    properties: Mapped[dict] = mapped_column(default=dict)  # admin_state_up, shared, dns_domain, tags...
    mtu: Mapped[int] = mapped_column(Integer, default=1500)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class Subnet(Base):
    __tablename__ = "subnets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    network_id: Mapped[str] = mapped_column(String(36), index=True)
    name: Mapped[str] = mapped_column(String(255), index=True, default="")
    cidr: Mapped[str] = mapped_column(String(64))
    ip_version: Mapped[int] = mapped_column(Integer, default=4)
    gateway_ip: Mapped[str | None] = mapped_column(String(64))
    allocation_pools: Mapped[list] = mapped_column(default=list)  # [{start, end}]
    properties: Mapped[dict] = mapped_column(default=dict)  # enable_dhcp, host_routes, dns_nameservers...
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class NetworkPort(Base):
    __tablename__ = "network_ports"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    network_id: Mapped[str] = mapped_column(String(36), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    mac_address: Mapped[str] = mapped_column(String(17), unique=True)
    properties: Mapped[dict] = mapped_column(default=dict)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


# -- reading ---------------------------------------------------------------------------
def _one(s: Session, model: type, name_or_id: str, what: str, **where: Any) -> Any:
    row = s.get(model, name_or_id)
    if row is None:
        q = select(model).where(model.name == name_or_id)
        for k, v in where.items():
            q = q.where(getattr(model, k) == v)
        rows = list(s.scalars(q.limit(2)))
        if len(rows) > 1:
            raise Conflict(f"more than one {what} is named {name_or_id!r}: give its id")
        row = rows[0] if rows else None
    if row is None:
        raise NotFound(f"no {what} {name_or_id!r}")
    return row


def network_dict(s: Session, net: Network) -> dict:
    subnets = list(s.scalars(select(Subnet.id).where(Subnet.network_id == net.id).order_by(Subnet.created_at)))
    return {"id": net.id, "name": net.name, "mtu": net.mtu, "subnets": subnets, "status": "ACTIVE",
            **net.properties}


def subnet_dict(sub: Subnet) -> dict:
    return {"id": sub.id, "name": sub.name, "network_id": sub.network_id, "cidr": sub.cidr,
            "ip_version": sub.ip_version, "gateway_ip": sub.gateway_ip,
            "allocation_pools": sub.allocation_pools, **sub.properties}


def address_key(s: Session, sub: Subnet) -> str:
    """The address table's key of a subnet's addresses."""
    net = s.get(Network, sub.network_id)
    space = (net.properties or {}).get(ADDRESS_SPACE) if net is not None else None
    return str(space) if space else f"subnet:{sub.id}"


def _port_addresses(s: Session, port: NetworkPort) -> list[tuple[str, str]]:
    """(subnet id, address) of each address the port holds."""
    ips = list(s.scalars(select(Address.address).where(Address.holder.startswith(port_prefix(port.id),
                                                                                  autoescape=True))))
    subnets = list(s.scalars(select(Subnet).where(Subnet.network_id == port.network_id)))
    out = []
    for ip in ips:
        sub = next((x for x in subnets if ipaddress.ip_address(ip) in ipaddress.ip_network(x.cidr)), None)
        if sub is not None:
            out.append((sub.id, ip))
    return out


def port_dict(s: Session, port: NetworkPort) -> dict:
    ips = _port_addresses(s, port)
    order = port.properties.get("order") or []
    ips.sort(key=lambda r: order.index(r[1]) if r[1] in order else len(order))
    props = {k: v for k, v in port.properties.items() if k != "order"}
    return {"id": port.id, "name": port.name, "network_id": port.network_id, "mac_address": port.mac_address,
            "fixed_ips": [{"subnet_id": sid, "ip_address": ip} for sid, ip in ips], "status": "DOWN", **props}


# -- networks and subnets ----------------------------------------------------------------
def create_network(s: Session, name: str, properties: dict, mtu: int = 1500) -> dict:
    net = Network(id=str(uuid.uuid4()), name=name or "", properties=properties, mtu=mtu)
    s.add(net)
    s.flush()
    return network_dict(s, net)


def update_network(s: Session, net_id: str, name: str, properties: dict) -> dict:
    net = _one(s, Network, net_id, "network")
    space = (net.properties or {}).get(ADDRESS_SPACE)  # where its ports' addresses are: kept
    net.name, net.properties = name or "", {**properties, **({ADDRESS_SPACE: space} if space else {})}
    return network_dict(s, net)


def delete_network(s: Session, net_id: str) -> None:
    """Its subnets go with it; a port still on it makes this a Conflict (as Neutron)."""
    if s.scalars(select(NetworkPort.id).where(NetworkPort.network_id == net_id).limit(1)).first():
        raise Conflict(f"network {net_id} still has ports")
    s.execute(delete(Subnet).where(Subnet.network_id == net_id))
    s.execute(delete(Network).where(Network.id == net_id))


def ensure_network(s: Session, net_id: str, name: str, cidr: str, gateway: str, pools: list[dict],
                   properties: dict) -> None:
    """Make network `name` with one subnet unless a network of that name exists (the
    undercloud's own, which ports name without a stack making it). `net_id` is fixed, so of
    two racing makers one wins and the other finds it."""
    if s.get(Network, net_id) is not None or s.scalars(select(Network.id).where(Network.name == name)).first():
        return
    try:
        with s.begin_nested():
            s.add(Network(id=net_id, name=name, properties=properties))
            s.add(Subnet(id=str(uuid.uuid5(uuid.UUID(net_id), "subnet")), network_id=net_id, name=f"{name}-subnet",
                         cidr=cidr, ip_version=4, gateway_ip=gateway, allocation_pools=pools,
                         properties={"enable_dhcp": False}))
    except IntegrityError:
        pass  # made at the same moment by another port


def find_network(s: Session, name_or_id: str) -> dict:
    return network_dict(s, _one(s, Network, name_or_id, "network"))


def _pools(net: ipaddress._BaseNetwork, gateway: str | None, pools: list | None) -> list[dict]:
    """The allocation pools, checked; by default every host address but the gateway."""
    if not pools:
        hosts = list(_host_range(net))
        if not hosts:
            raise InvalidInput(f"subnet {net} has no host addresses", "cidr")
        first, last = hosts[0], hosts[1]
        if gateway and ipaddress.ip_address(gateway) == first:
            first += 1
        elif gateway and ipaddress.ip_address(gateway) == last:
            last -= 1
        return [{"start": str(first), "end": str(last)}] if first <= last else []
    out = []
    for p in pools:
        try:
            start, end = ipaddress.ip_address(p["start"]), ipaddress.ip_address(p["end"])
        except (KeyError, TypeError, ValueError):
            raise InvalidInput(f"allocation_pools: {p!r} is not {{start, end}} addresses", "allocation_pools") from None
        if start not in net or end not in net or start > end:
            raise InvalidInput(f"allocation_pools: {p['start']}-{p['end']} is not a range within {net}",
                               "allocation_pools")
        out.append({"start": str(start), "end": str(end)})
    return out


def _host_range(net: ipaddress._BaseNetwork) -> tuple:
    """First and last usable host address (no network/broadcast address in IPv4 /30 and wider)."""
    if net.version == 4 and net.prefixlen < 31:
        return (net.network_address + 1, net.broadcast_address - 1) if net.num_addresses > 2 else ()
    return (net.network_address, net.broadcast_address) if net.version == 4 else \
        (net.network_address + 1, net.broadcast_address)


def create_subnet(s: Session, network: str, name: str, cidr: str, ip_version: int, gateway_ip: Any,
                  allocation_pools: list | None, properties: dict) -> dict:
    """`gateway_ip`: an address, None for the first host address (Neutron's default), or ""
    for no gateway."""
    net_row = _one(s, Network, network, "network")
    try:
        net = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        raise InvalidInput(f"cidr {cidr!r} is not a network address", "cidr") from None
    if net.version != int(ip_version):
        raise InvalidInput(f"cidr {cidr} is not an IPv{ip_version} network", "ip_version")
    gateway = _gateway(net, gateway_ip)
    pools = _pools(net, gateway, allocation_pools)
    for other in s.scalars(select(Subnet).where(Subnet.network_id == net_row.id)):
        if ipaddress.ip_network(other.cidr).overlaps(net):
            raise Conflict(f"cidr {net} overlaps subnet {other.name or other.id} ({other.cidr}) of network "
                           f"{net_row.name or net_row.id}")
    sub = Subnet(id=str(uuid.uuid4()), network_id=net_row.id, name=name or "", cidr=str(net),
                 ip_version=net.version, gateway_ip=gateway, allocation_pools=pools, properties=properties)
    s.add(sub)
    s.flush()
    return subnet_dict(sub)


def _gateway(net: ipaddress._BaseNetwork, gateway_ip: Any) -> str | None:
    if gateway_ip is None:
        hosts = _host_range(net)
        return str(hosts[0]) if hosts else None
    if gateway_ip == "":
        return None
    try:
        return str(ipaddress.ip_address(gateway_ip))
    except ValueError:
        raise InvalidInput(f"gateway_ip {gateway_ip!r} is not an address", "gateway_ip") from None


def update_subnet(s: Session, subnet_id: str, name: str, gateway_ip: Any, allocation_pools: list | None,
                  properties: dict) -> dict:
    """Addresses already given stay (as Neutron's): the pools say where new ones come from."""
    sub = _one(s, Subnet, subnet_id, "subnet")
    net = ipaddress.ip_network(sub.cidr)
    sub.gateway_ip = _gateway(net, gateway_ip)
    sub.allocation_pools = _pools(net, sub.gateway_ip, allocation_pools)
    sub.name, sub.properties = name or "", properties
    return subnet_dict(sub)


def delete_subnet(s: Session, subnet_id: str) -> None:
    sub = s.get(Subnet, subnet_id)
    if sub is not None:
        net = ipaddress.ip_network(sub.cidr)
        held = s.scalars(select(Address.address).where(Address.network == address_key(s, sub),
                                                       Address.holder.startswith(PORT)))
        if any(ipaddress.ip_address(ip) in net for ip in held):
            raise Conflict(f"subnet {subnet_id} still has addresses in use")
    s.execute(delete(Subnet).where(Subnet.id == subnet_id))


# -- ports ---------------------------------------------------------------------------
def _free_address(s: Session, sub: Subnet) -> str:
    used = set(s.scalars(select(Address.address).where(Address.network == address_key(s, sub))))
    for pool in sub.allocation_pools:
        ip, end = ipaddress.ip_address(pool["start"]), ipaddress.ip_address(pool["end"])
        while ip <= end:
            if str(ip) not in used and str(ip) != sub.gateway_ip:
                return str(ip)
            ip += 1
    raise Conflict(f"no free address left in subnet {sub.name or sub.id} ({sub.cidr})")


def _addresses(s: Session, net: Network, fixed_ips: list | None,
               keep: set[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """(subnet id, address) for each requested fixed IP (any free one where none is named,
    or one of `keep`, the port's own, in that subnet); with no fixed_ips, one from the
    network's first subnet (none if it has no subnet)."""
    keep = set(keep or ())
    subnets = list(s.scalars(select(Subnet).where(Subnet.network_id == net.id).order_by(Subnet.created_at)))

    def any_free(sub: Subnet) -> str:
        own = sorted(ip for sid, ip in keep if sid == sub.id)
        if own:
            keep.discard((sub.id, own[0]))
            return own[0]
        return _free_address(s, sub)

    if fixed_ips is None:
        return [(subnets[0].id, any_free(subnets[0]))] if subnets else []
    out = []
    for i, spec in enumerate(fixed_ips):
        spec = spec if isinstance(spec, dict) else {}
        want_sub, want_ip = spec.get("subnet") or spec.get("subnet_id"), spec.get("ip_address")
        if want_sub:
            sub = _one(s, Subnet, str(want_sub), "subnet", network_id=net.id)
            if sub.network_id != net.id:
                raise InvalidInput(f"fixed_ips[{i}]: subnet {want_sub} is not on network {net.name or net.id}",
                                   "fixed_ips")
        elif want_ip:
            sub = next((x for x in subnets if ipaddress.ip_address(want_ip) in ipaddress.ip_network(x.cidr)), None)
            if sub is None:
                raise InvalidInput(f"fixed_ips[{i}]: {want_ip} is in no subnet of network {net.name or net.id}",
                                   "fixed_ips")
        elif subnets:
            sub = subnets[0]
        else:
            raise InvalidInput(f"fixed_ips[{i}]: network {net.name or net.id} has no subnet", "fixed_ips")
        if want_ip:
            try:
                ip = str(ipaddress.ip_address(want_ip))
            except ValueError:
                raise InvalidInput(f"fixed_ips[{i}]: {want_ip!r} is not an address", "fixed_ips") from None
            if ipaddress.ip_address(ip) not in ipaddress.ip_network(sub.cidr):
                raise InvalidInput(f"fixed_ips[{i}]: {ip} is not in subnet {sub.name or sub.id} ({sub.cidr})",
                                   "fixed_ips")
        else:
            ip = any_free(sub)
        keep.discard((sub.id, ip))
        out.append((sub.id, ip))
    return out


def _check_free(s: Session, port_id: str | None, addresses: list[tuple[str, str]]) -> None:
    """Before any write: a refusal leaves nothing half-made."""
    if len(set(addresses)) != len(addresses):
        raise InvalidInput("fixed_ips: one address asked for twice", "fixed_ips")
    for sid, ip in addresses:
        taken = s.get(Address, (address_key(s, s.get(Subnet, sid)), ip))
        if taken is not None and (port_id is None or taken.holder != port_holder(port_id, ip)):
            raise Conflict(f"address {ip} is already in use ({holder_words(taken.holder)})")


def _take(s: Session, port_id: str, addresses: list[tuple[str, str]]) -> None:
    now = time.time()
    for sid, ip in addresses:
        key, mine = address_key(s, s.get(Subnet, sid)), port_holder(port_id, ip)
        held = s.get(Address, (key, ip))
        if held is None:
            s.add(Address(network=key, address=ip, holder=mine, created_at=now))
        elif held.holder != mine:
            raise Conflict(f"address {ip} is already in use ({holder_words(held.holder)})")
    try:
        s.flush()
    except IntegrityError:  # taken by a transaction that committed after we looked
        raise Conflict(f"an address of {', '.join(ip for _sid, ip in addresses)} was taken meanwhile") from None


def _mac(s: Session, given: str | None) -> str:
    if given:
        mac = str(given).lower()
        parts = mac.split(":")
        if len(parts) != 6 or not all(len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts):
            raise InvalidInput(f"mac_address {given!r} is not a MAC address", "mac_address")
        if s.scalars(select(NetworkPort.id).where(NetworkPort.mac_address == mac)).first():
            raise Conflict(f"mac_address {mac} is already in use")
        return mac
    for _ in range(100):
        mac = MAC_PREFIX + "".join(f":{b:02x}" for b in secrets.token_bytes(3))
        if not s.scalars(select(NetworkPort.id).where(NetworkPort.mac_address == mac)).first():
            return mac
    raise Conflict("no free MAC address found")


def create_port(s: Session, network: str, name: str, fixed_ips: list | None, mac_address: str | None,
                properties: dict) -> dict:
    net = _one(s, Network, network, "network")
    port = NetworkPort(id=str(uuid.uuid4()), network_id=net.id, name=name or "", mac_address=_mac(s, mac_address),
                       properties=properties)
    s.add(port)
    try:
        s.flush()  # first write: on SQLite the transaction now holds the write lock, so the
    except IntegrityError:  # free addresses read below stay free until it commits
        raise Conflict(f"mac_address {port.mac_address} is already in use") from None
    try:
        addresses = _addresses(s, net, fixed_ips)
        _check_free(s, None, addresses)
    except UndercloudError:
        s.delete(port)  # refused: nothing of it stays, whatever the caller commits
        s.flush()
        raise
    port.properties = {**properties, "order": [ip for _sid, ip in addresses]}
    _take(s, port.id, addresses)
    return port_dict(s, port)


def update_port(s: Session, port_id: str, name: str, fixed_ips: list | None, properties: dict) -> dict:
    port = _one(s, NetworkPort, port_id, "port")
    old_name = port.name
    port.name = name or ""
    s.flush()  # first write, before the addresses are read (see create_port)
    net = _one(s, Network, port.network_id, "network")
    keep = set(_port_addresses(s, port))
    try:
        addresses = _addresses(s, net, fixed_ips, keep)
        _check_free(s, port.id, addresses)
    except UndercloudError:
        port.name = old_name
        s.flush()
        raise
    _release(s, port.id)
    _take(s, port.id, addresses)
    port.properties = {**properties, "order": [ip for _sid, ip in addresses]}
    return port_dict(s, port)


def _release(s: Session, port_id: str) -> None:
    s.execute(delete(Address).where(Address.holder.startswith(port_prefix(port_id), autoescape=True)))


def delete_port(s: Session, port_id: str) -> None:
    _release(s, port_id)
    s.execute(delete(NetworkPort).where(NetworkPort.id == port_id))


def subnets_of(s: Session, ids: list[str]) -> list[dict]:
    return [subnet_dict(x) for x in s.scalars(select(Subnet).where(Subnet.id.in_(ids)))]
