"""OS::Neutron::Net, Subnet and Port as address bookkeeping in the undercloud's store
(store/networks.py), the part of Neutron TripleO's templates use: unique fixed IPs from a
subnet's allocation pools, unique MAC addresses, and the attributes templates read
(`fixed_ips`, `subnets`, `cidr`, `mac_address`...). Properties are Heat's; those with no
meaning here (QoS, security groups, bindings) are accepted and kept."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from undercloud.errors import UndercloudError
from undercloud.host.labnet import LAB_NETWORK
from undercloud.orchestration.resources.base import Plugin, Prop, ResourceFailure
from undercloud.orchestration.template.functions import Unknown
from undercloud.orchestration.template.validation import placeholder_properties, validate_properties

if TYPE_CHECKING:
    from undercloud.orchestration.template.definitions import ResourceDefinition
    from undercloud.orchestration.template.stack import StackTemplate


def is_valid_ip(address: str) -> bool:
    """As oslo's netutils.is_valid_ip (Heat's check): IPv4 as inet_aton takes it ("10.1" too), or IPv6."""
    for parse in (socket.inet_aton, lambda a: socket.inet_pton(socket.AF_INET6, a)):
        try:
            parse(address)
            return True
        except (OSError, ValueError):
            continue
    return False


def subnet_problem(props: Mapping) -> tuple[str, str | None] | None:
    """Heat's Subnet.validate on the values known (a runtime value counts as given):
    (message, the property it names) for the first rule broken, else None."""
    def given(k: str) -> bool:
        return props.get(k) is not None and props.get(k) != ""

    if props.get("subnetpool") is not None and given("cidr"):
        return "Cannot define the following properties at the same time: subnetpool, cidr.", None
    if props.get("subnetpool") is None and not given("cidr"):
        return "At least one of the following properties must be specified: subnetpool, cidr.", None
    if given("prefixlen") and props.get("prefixlen") != 0 and given("cidr"):
        return "Cannot define the following properties at the same time: prefixlen, cidr.", None
    ra, mode = (None if isinstance(v, Unknown) else v for v in (props.get("ipv6_ra_mode"),
                                                                 props.get("ipv6_address_mode")))
    if str(props.get("ip_version", 4)) == "4" and (ra or mode):
        return "ipv6_ra_mode and ipv6_address_mode are not supported for ipv4.", "ipv6_ra_mode" if ra else \
            "ipv6_address_mode"
    if ra and mode and ra != mode:
        return "When both ipv6_ra_mode and ipv6_address_mode are set, they must be equal.", "ipv6_address_mode"
    gw = props.get("gateway_ip")
    if isinstance(gw, str) and gw not in ("~", "", "auto") and not is_valid_ip(gw):
        return f'Gateway IP address "{gw}" is in invalid format.', "gateway_ip"
    return None


def _ipam():
    # imported when a resource runs: validating a template needs no store (SQLAlchemy costs 0.25 s)
    from undercloud.store import networks

    return networks


class _Neutron(Plugin):
    blocking = True  # store writes

    def _session(self):
        return self.services.store.session()

    def _call(self, fn, *args: Any) -> Any:
        """`fn(session, *args)` in one transaction; a store refusal is the resource's failure."""
        try:
            with self._session() as s:
                return fn(s, *args)
        except UndercloudError as exc:
            raise ResourceFailure(str(exc)) from None

    def _kept(self) -> dict:
        """The properties stored as they are (not the ones this type acts on)."""
        return {k: v for k, v in self.properties.items() if k not in self.acted_on and v is not None}

    acted_on: frozenset[str] = frozenset()

    def attributes(self) -> dict:
        shown = dict(self.data.get("shown") or {})
        return {**shown, "show": shown}

    def reference_id(self) -> str:
        return self.physical_id or self.name


class Net(_Neutron):
    type_name = "OS::Neutron::Net"
    properties_schema = {
        "name": Prop("string", update_allowed=True, description="The network's name."),
        "value_specs": Prop("map", default={}, update_allowed=True, description="Extra attributes (kept)."),
        "admin_state_up": Prop("boolean", default=True, update_allowed=True, description="Administrative state."),
        "tenant_id": Prop("string", description="The project owning it."),
        "shared": Prop("boolean", default=False, update_allowed=True, description="Shared between projects."),
        "dhcp_agent_ids": Prop("list", update_allowed=True, description="DHCP agents (kept; none run here)."),
        "port_security_enabled": Prop("boolean", update_allowed=True, description="Port security default."),
        "qos_policy": Prop("string", update_allowed=True, description="QoS policy (kept)."),
        "dns_domain": Prop("string", update_allowed=True, description="DNS domain of its ports."),
        "tags": Prop("list", update_allowed=True, description="Tags."),
    }
    attributes_schema = {
        "status": "ACTIVE.", "name": "The name.", "subnets": "Its subnets' ids.",
        "admin_state_up": "Administrative state.", "tenant_id": "The project.", "mtu": "The MTU.",
        "port_security_enabled": "Port security default.", "qos_policy_id": "QoS policy.",
        "l2_adjacency": "True.", "segments": "[] (no segments here).", "show": "Every attribute.",
    }
    acted_on = frozenset({"name"})

    def _record(self, net: dict) -> None:
        self.physical_id = net["id"]
        self.data["shown"] = {**net, "l2_adjacency": True, "segments": [], "qos_policy_id": net.get("qos_policy")}

    def create(self) -> None:
        if self.physical_id:  # an interrupted earlier call made it
            return
        self._record(self._call(_ipam().create_network, self.properties.get("name") or "", self._kept()))

    def update(self, old_properties: dict) -> None:
        self._record(self._call(_ipam().update_network, self.physical_id, self.properties.get("name") or "",
                                self._kept()))

    def attributes(self) -> dict:
        if self.physical_id:  # subnets made since
            self._record(self._call(_ipam().find_network, self.physical_id))
        return super().attributes()

    def delete(self) -> None:
        if self.physical_id:
            self._call(_ipam().delete_network, self.physical_id)


class Subnet(_Neutron):
    type_name = "OS::Neutron::Subnet"
    properties_schema = {
        "network": Prop("string", description="The network (name or id)."),
        "network_id": Prop("string", description="Deprecated: use network."),
        "subnetpool": Prop("string", description="Not supported here: give cidr."),
        "prefixlen": Prop("integer", description="With subnetpool (not supported here)."),
        "cidr": Prop("string", description="The subnet's network address."),
        "value_specs": Prop("map", default={}, update_allowed=True, description="Extra attributes (kept)."),
        "name": Prop("string", update_allowed=True, description="The subnet's name."),
        "ip_version": Prop("integer", default=4, allowed=(4, 6), description="4 or 6."),
        "dns_nameservers": Prop("list", default=[], update_allowed=True, description="DNS servers."),
        "gateway_ip": Prop("string", update_allowed=True,
                           description="The gateway; omitted: the first host address; empty: none."),
        "enable_dhcp": Prop("boolean", default=True, update_allowed=True, description="DHCP (kept)."),
        "allocation_pools": Prop("list", update_allowed=True,
                                 description="[{start, end}] fixed IPs are allocated from (default: every host)."),
        "tenant_id": Prop("string", description="The project owning it."),
        "host_routes": Prop("list", update_allowed=True, description="[{destination, nexthop}]."),
        "ipv6_ra_mode": Prop("string", description="IPv6 router advertisement mode (kept)."),
        "ipv6_address_mode": Prop("string", description="IPv6 address mode (kept)."),
        "segment": Prop("string", update_allowed=True, description="Segment (kept)."),
        "tags": Prop("list", update_allowed=True, description="Tags."),
    }
    attributes_schema = {
        "name": "The name.", "network_id": "The network's id.", "tenant_id": "The project.",
        "allocation_pools": "[{start, end}].", "gateway_ip": "The gateway.", "host_routes": "Host routes.",
        "ip_version": "4 or 6.", "cidr": "The network address.", "dns_nameservers": "DNS servers.",
        "enable_dhcp": "DHCP.", "show": "Every attribute.",
    }
    acted_on = frozenset({"network", "network_id", "cidr", "name", "ip_version", "gateway_ip",
                          "allocation_pools", "subnetpool", "prefixlen"})

    @classmethod
    def validate_definition(cls, t: StackTemplate, rd: ResourceDefinition) -> None:
        """The properties, then Heat's Subnet.validate rules (run by Heat in nested stacks too)."""
        if not t.check_values or not isinstance(rd.properties, Mapping) or rd.external_id is not None:
            validate_properties(t, rd)
            return
        resolved = placeholder_properties(t, rd)
        validate_properties(t, rd, resolved)
        found = subnet_problem(resolved)
        if found:
            message, key = found
            t.add(("resources", rd.name, "properties") + ((key,) if key in rd.properties else ()), message)

    def create(self) -> None:
        if self.physical_id:
            return
        p = self.properties
        network = p.get("network") or p.get("network_id")
        if not network:
            raise ResourceFailure("network: a subnet needs its network")
        if not p.get("cidr"):
            raise ResourceFailure("cidr: required here (subnet pools are not supported)")
        sub = self._call(_ipam().create_subnet, str(network), p.get("name") or "", p["cidr"],
                         int(p.get("ip_version") or 4), p.get("gateway_ip"), p.get("allocation_pools"),
                         {"dns_nameservers": [], "host_routes": [], **self._kept()})
        self.physical_id = sub["id"]
        self.data["shown"] = sub

    def update(self, old_properties: dict) -> None:
        p = self.properties
        self.data["shown"] = self._call(_ipam().update_subnet, self.physical_id, p.get("name") or "",
                                        p.get("gateway_ip"), p.get("allocation_pools"),
                                        {"dns_nameservers": [], "host_routes": [], **self._kept()})

    def delete(self) -> None:
        if self.physical_id:
            self._call(_ipam().delete_subnet, self.physical_id)


FIXED_IP = {
    "subnet_id": Prop("string", description="Deprecated: use subnet."),
    "subnet": Prop("string", description="The subnet (name or id) to take the address from."),
    "ip_address": Prop("string", description="The address (default: a free one of the pools)."),
}


class Port(_Neutron):
    type_name = "OS::Neutron::Port"
    properties_schema = {
        "network": Prop("string", description="The network (name or id)."),
        "network_id": Prop("string", description="Deprecated: use network."),
        "name": Prop("string", update_allowed=True, description="The port's name."),
        "value_specs": Prop("map", default={}, update_allowed=True, description="Extra attributes (kept)."),
        "admin_state_up": Prop("boolean", default=True, update_allowed=True, description="Administrative state."),
        "fixed_ips": Prop("list", update_allowed=True, schema=FIXED_IP,
                          description="[{subnet, ip_address}]: one address each (a free one where none is given)."),
        "no_fixed_ips": Prop("boolean", default=False, update_allowed=True, description="No address at all."),
        "mac_address": Prop("string", description="The MAC address (default: a free fa:16:3e:xx:xx:xx)."),
        "device_id": Prop("string", update_allowed=True, description="The device using it."),
        "device_owner": Prop("string", update_allowed=True, description="The device's owner."),
        "security_groups": Prop("list", update_allowed=True, description="Security groups (kept)."),
        "allowed_address_pairs": Prop("list", update_allowed=True, description="Allowed address pairs (kept)."),
        "binding:vnic_type": Prop("string", update_allowed=True, description="VNIC type (kept)."),
        "binding:profile": Prop("map", update_allowed=True, description="Binding profile (kept)."),
        "port_security_enabled": Prop("boolean", update_allowed=True, description="Port security."),
        "qos_policy": Prop("string", update_allowed=True, description="QoS policy (kept)."),
        "replacement_policy": Prop("string", default="AUTO", allowed=("REPLACE_ALWAYS", "AUTO"),
                                   update_allowed=True, description="Deprecated in Heat; kept."),
        "dns_name": Prop("string", update_allowed=True, description="DNS name."),
        "propagate_uplink_status": Prop("boolean", update_allowed=True, description="Kept."),
        "tags": Prop("list", update_allowed=True, description="Tags."),
    }
    attributes_schema = {
        "admin_state_up": "Administrative state.", "device_id": "The device.", "device_owner": "Its owner.",
        "fixed_ips": "[{subnet_id, ip_address}].", "mac_address": "The MAC address.", "name": "The name.",
        "network_id": "The network's id.", "network": "The network, all its attributes.",
        "security_groups": "Security groups.", "status": "DOWN (nothing is bound here).",
        "tenant_id": "The project.", "allowed_address_pairs": "Allowed address pairs.",
        "subnets": "The subnets of its fixed IPs, all their attributes.",
        "port_security_enabled": "Port security.", "qos_policy_id": "QoS policy.",
        "dns_assignment": "[{hostname, ip_address, fqdn}].", "show": "Every attribute.",
    }
    acted_on = frozenset({"network", "network_id", "name", "fixed_ips", "no_fixed_ips", "mac_address"})

    def _fixed_ips(self) -> list | None:
        p = self.properties
        return [] if p.get("no_fixed_ips") else p.get("fixed_ips")

    def _record(self, port: dict) -> None:
        self.physical_id = port["id"]

        def extra(s):
            return {"network": _ipam().find_network(s, port["network_id"]),
                    "subnets": _ipam().subnets_of(s, [f["subnet_id"] for f in port["fixed_ips"]])}

        more = self._call(extra)
        host = port.get("dns_name") or ""
        self.data["shown"] = {**port, **more, "qos_policy_id": port.get("qos_policy"),
                              "dns_assignment": [{"hostname": host, "ip_address": f["ip_address"], "fqdn": host}
                                                 for f in port["fixed_ips"]] if host else []}

    def create(self) -> None:
        if self.physical_id:
            return
        p = self.properties
        network = p.get("network") or p.get("network_id")
        if not network:
            raise ResourceFailure("network: a port needs its network")
        if network == LAB_NETWORK:  # needs no Net in the stack: the undercloud's own (_ctlplane)
            self._call(_ipam().ensure_network, *self._ctlplane())
        self._record(self._call(_ipam().create_port, str(network), p.get("name") or "", self._fixed_ips(),
                                p.get("mac_address"), self._kept()))

    def _ctlplane(self) -> tuple:
        """The undercloud's own ctlplane, as TripleO's undercloud had it in Neutron: the lab
        network of VM and bare-metal servers (the home's 192.168.N.0/24): ports take
        labnet.PORT_HOSTS, beside the servers', the virtual IPs' and the host's numbers there."""
        from undercloud.host.labnet import (  # nothing is made on the host
            PORT_HOSTS,
            UNDERCLOUD_ADDRESS,
            LabNetwork,
        )
        from undercloud.store.networks import ADDRESS_SPACE

        try:
            home = self.services.home
        except ResourceFailure:
            raise ResourceFailure(f"no network {LAB_NETWORK!r} (and no undercloud home to take it from)") from None
        lab = LabNetwork(home.instance)
        prefix = lab.subnet
        net_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"undercloud:{home.instance}:{LAB_NETWORK}"))
        pool = {"start": f"{prefix}.{PORT_HOSTS[0]}", "end": f"{prefix}.{PORT_HOSTS[-1]}"}
        # its ports' addresses on the servers' key: one table says who holds each (store/networks.py)
        return (net_id, LAB_NETWORK, f"{prefix}.0/24", f"{prefix}.{UNDERCLOUD_ADDRESS}", [pool],
                {"tags": [f"{prefix}.0/24"], "undercloud": True, ADDRESS_SPACE: lab.address_key})

    def update(self, old_properties: dict) -> None:
        self._record(self._call(_ipam().update_port, self.physical_id, self.properties.get("name") or "",
                                self._fixed_ips(), self._kept()))

    def delete(self) -> None:
        if self.physical_id:
            self._call(_ipam().delete_port, self.physical_id)
