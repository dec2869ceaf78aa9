"""The lab network as container servers use it: podman networks, the bridge, addresses, tunnels.

Apart from the realiser (container.py), which keeps the containers' life cycle, as the VM
servers' network is apart from theirs (vm_net.py). One `ContainerLabNetwork` per realiser
holds what this process knows of the network; its callers hold the realiser's lock.

- The lab network `<instance>-lab`: an *internal* podman network (no NAT, no default
  route, nothing leaves the machine) with a subnet derived from the instance and kept in
  `servers/container-network.json`, so it is the same after restarts and after the network
  was removed and made again.
- How the agent reaches the undercloud: netavark gives internal networks no host address,
  so the undercloud puts the subnet's gateway address (.1) on the network's bridge
  `<instance>-br` (made before netavark, which then uses it) and serves its API there on
  its own port (`Env.listen`, bound with IP_FREEBIND so it survives the bridge coming and
  going with the containers). Address and port are derived from the home: they stay the
  same across restarts, which is what the agents hold. Containers can reach nothing else
  on the host: the address is on their own bridge only.
- Several hosts on one network: another host's worker joins this host's lab network
  (UNDERCLOUD_LAB_NETWORK names it: store/lab_networks.py records each network's subnet and
  first host, and each member's tunnel end and address). Its own podman network and bridge
  (named after its own instance) get the same subnet, its worker an address of its own
  there (claimed in the address table as `host:<name>`, served to its servers' agents),
  and a VXLAN port on each member's bridge (host/tunnel.py, `<instance>-vx`) floods to the
  others: servers of every member, the overcloud's VIP and instances on the provider
  network share one layer-2 segment.
- A second port, `provider`, on the same bridge and without an address (the podman network
  `<instance>-provider`, IPAM none): an overcloud's Neutron bridges its flat provider
  network to it, so instances it boots are on the lab network and reach the undercloud.
- Addresses: the first free one of the subnet, never the gateway nor the ones kept for
  virtual IPs (`base.virtual_ips`: .250-.253, which `network_info()` offers to deploy);
  held in the store's address table (store/addresses.py) from create to delete.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.config import host_name
from undercloud.host import podman as hp
from undercloud.host import tunnel
from undercloud.host.run import run
from undercloud.provisioning.servers.base import RealiserError, Spec, virtual_ips
from undercloud.store.lab_networks import vni

log = logging.getLogger("undercloud.servers.container")  # the realiser's: its log lines are as before

NETWORKS_DIR = Path("/etc/containers/networks")  # netavark network configs (root podman)
PROVIDER_INTERFACE = "provider"  # each node's address-less port on the lab bridge


class ContainerLabNetwork:
    """This host's podman lab network, its bridge and tunnel, and the servers' addresses on it."""

    def __init__(self, env):
        self.env = env
        self.instance = env.home.instance
        self.network = f"{self.instance}-lab"  # this host's podman network
        # The lab network it is part of: its key in the store (address table, lab networks):
        # another host's that this host's worker joins (UNDERCLOUD_LAB_NETWORK), else its own.
        self.joined = os.environ.get("UNDERCLOUD_LAB_NETWORK") or None
        self.lab = self.joined or self.network
        self.bridge = f"{self.instance}-br"  # at most 15 characters (IFNAMSIZ)
        self.tunnel = f"{self.instance}-vx"  # the VXLAN port to the network's other hosts
        self._peers: set[str] | None = None  # the tunnel's other ends as last set
        # A second port of every node on the same bridge, without an address: what an
        # overcloud's Neutron bridges its flat provider network to (PROVIDER_INTERFACE).
        self.provider = f"{self.instance}-provider"
        self._info: dict | None = None  # the network as made in this process
        self._adopted = False  # the labelled addresses of older containers are in the table

    # ---- what is kept for the next start ---------------------------------------------
    @property
    def _file(self) -> Path:
        return Path(self.env.home.path) / "servers" / "container-network.json"

    def saved(self) -> dict:
        try:
            saved = json.loads(self._file.read_text())
        except (OSError, ValueError):
            return {}
        return saved if isinstance(saved, dict) else {}

    def save(self, info: dict) -> None:
        """Keep the network's subnet and addresses for the next start: replaced whole (a
        crash leaves the old file or the new one, never a part: files.write_atomic)."""
        if self.saved() != info:
            write_atomic(self._file, json.dumps(info), 0o644)

    def subnet_choices(self):
        saved = self.saved().get("subnet")
        if saved:
            yield saved
        h = hashlib.sha256(self.instance.encode()).digest()
        for i in range(64):  # 10.128.0.0/9 space, a /24 per instance
            yield f"10.{128 + (h[0] + i) % 128}.{(h[1] + 7 * i) % 256}.0/24"

    # ---- the network -------------------------------------------------------------------
    def ensure(self) -> dict:
        """Make the lab network, its bridge and address, and the listener (idempotent).

        Once known in this process only the bridge address is re-asserted (one `ip` call):
        netavark removes the bridge with the last container and makes it afresh."""
        if self._info is not None and all((NETWORKS_DIR / f"{n}.json").exists()
                                          for n in (self.network, self.provider)):
            self._bridge_address(self._info)
            if self._peers:  # shared with other hosts: the tunnel on the bridge (netavark may have made it afresh)
                self.sync_tunnel(force=True)
            return self._info
        shared = self._shared()
        own = self._own_address(shared) if shared else None
        net = self.inspect()
        if net is not None and shared is not None and net["subnets"][0]["subnet"] != shared["subnet"]:
            raise RealiserError(f"podman network {self.network} has subnet {net['subnets'][0]['subnet']}, but the lab "
                                f"network {self.lab} it joins has {shared['subnet']}: remove it (podman network rm "
                                f"{self.network}) with its containers")
        if net is None:
            last = ""
            for subnet in [shared["subnet"]] if shared else self.subnet_choices():
                # the undercloud's address here, reserved from podman's IPAM (netavark may put
                # it on the bridge: on a network it joins, this host's own, never the first's)
                gateway = own or str(next(ipaddress.ip_network(subnet).hosts()))
                proc = hp.podman("network", "create", "--internal", "--disable-dns", "--subnet", subnet,
                                 "--gateway", gateway,
                                 "--label", f"undercloud.instance={self.instance}", self.network, check=False)
                if proc.returncode == 0:
                    break
                last = proc.stderr.strip().splitlines()[-1:] or [""]
                last = last[0]
                if "already" not in last:
                    raise RealiserError(f"podman network create {self.network}: {last}")
            else:
                raise RealiserError(f"no free /24 subnet for {self.network}: {last}")
            self._name_bridge(self.network)
            net = self.inspect()
            if net is None:
                raise RealiserError(f"podman network {self.network} vanished after create")
        if hp.podman("network", "exists", self.provider, check=False).returncode != 0:
            proc = hp.podman("network", "create", "--internal", "--disable-dns", "--ipam-driver", "none",
                             "--label", f"undercloud.instance={self.instance}", self.provider, check=False)
            if proc.returncode != 0 and hp.podman("network", "exists", self.provider, check=False).returncode:
                raise RealiserError(f"podman network create {self.provider}: {proc.stderr.strip()}")
            self._name_bridge(self.provider)
        subnet = net["subnets"][0]
        # Internal networks have no gateway in their config: the undercloud takes the first address.
        gateway = subnet.get("gateway") or str(next(ipaddress.ip_network(subnet["subnet"]).hosts()))
        # gateway: the lab network's first host's address; address: this host's (the same on the first)
        info = {"subnet": subnet["subnet"], "gateway": shared["gateway"] if shared else gateway,
                "address": own or gateway}
        self.save(info)
        self._bridge_address(info)
        self.env.listen(info["address"])
        self._record(info)
        self._info = info
        self.sync_tunnel(force=True)
        return info

    def network_info(self, info: dict) -> dict:
        """What the realiser's `network_info()` tells of the network `ensure()` made: its key,
        its virtual IPs, the provider port and the hosts on it."""
        hosts = self.env.lab_networks.members(self.lab) if self.env.lab_networks is not None else []
        return {"network": self.lab, **info, "virtual_ips": virtual_ips(info["subnet"]),
                "provider_interface": PROVIDER_INTERFACE, "hosts": hosts}

    def inspect(self) -> dict | None:
        proc = hp.podman("network", "inspect", self.network, check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)
        return data[0] if data else None

    def remove(self) -> list[str]:
        """The podman networks, the tunnel and the bridge (no container of this instance is
        left); returns what was removed."""
        removed = []
        self._info = None
        for network in (self.network, self.provider):
            if hp.podman("network", "exists", network, check=False).returncode == 0:
                hp.podman("network", "rm", "-f", network, check=False)
                removed.append(network)
        if tunnel.remove(self.tunnel):
            removed.append(self.tunnel)
        self._peers = None
        if run(["ip", "link", "show", self.bridge], check=False).returncode == 0:
            run(["ip", "link", "del", self.bridge], check=False)
            removed.append(self.bridge)
        return removed

    def _name_bridge(self, network: str) -> None:
        """Give the network our bridge name (podman 4.3's CLI cannot): netavark reads it here."""
        path = NETWORKS_DIR / f"{network}.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise RealiserError(f"cannot read the network config {path}: {exc}") from None
        if data.get("network_interface") != self.bridge:
            data["network_interface"] = self.bridge
            write_atomic(path, json.dumps(data, indent=5), 0o644)

    def _bridge_address(self, info: dict) -> None:
        prefix = ipaddress.ip_network(info["subnet"]).prefixlen
        address = info.get("address", info["gateway"])
        if run(["ip", "addr", "replace", f"{address}/{prefix}", "dev", self.bridge],
               check=False).returncode != 0:  # no bridge (yet, or any more): make it
            run(["ip", "link", "add", self.bridge, "type", "bridge"], check=False)
            run(["ip", "addr", "replace", f"{address}/{prefix}", "dev", self.bridge])
            self._peers = None  # a new bridge: the tunnel port goes on it again
        run(["ip", "link", "set", self.bridge, "up"])

    # ---- other hosts on it -------------------------------------------------------------
    def _shared(self) -> dict | None:
        """The store's record of the network this host joins (None: this host's own)."""
        if not self.joined or self.env.lab_networks is None:
            return None
        row = self.env.lab_networks.get(self.joined)
        if row is None:
            raise RealiserError(f"lab network {self.joined} (UNDERCLOUD_LAB_NETWORK) is not in the store: its first "
                                "host records it when it makes its network (its first container server)")
        first = next((m for m in self.env.lab_networks.members(self.joined) if m["host"] == row["host"]), None)
        if row["host"] != host_name() and (first is None or not first["endpoint"]):
            raise RealiserError(f"lab network {self.joined}: its first host {row['host']} has no address other hosts "
                                "reach (start its undercloud with --listen ADDRESS)")
        return row

    def _own_address(self, shared: dict) -> str:
        """This host's address on a lab network it joins: claimed in the address table (as
        `host:<name>`, kept across restarts), from the top down, never the first host's nor a VIP."""
        from undercloud.store.addresses import NoFreeAddress

        kept = {shared["gateway"], *virtual_ips(shared["subnet"])}
        hosts = [str(h) for h in ipaddress.ip_network(shared["subnet"]).hosts() if str(h) not in kept]
        try:
            return self.env.addresses.claim(self.lab, f"host:{host_name()}", reversed(hosts))
        except NoFreeAddress:
            raise RealiserError(f"the lab network {self.lab} ({shared['subnet']}) has no free address for host "
                                f"{host_name()}") from None

    def _record(self, info: dict) -> None:
        """This host on the network, in the store: the network itself when this host made it
        first, and where its tunnel ends (for the other hosts)."""
        lab = self.env.lab_networks
        if lab is None:
            return
        if not self.joined:
            lab.define(self.lab, info["subnet"], info["gateway"], host_name())
        lab.join(self.lab, host_name(), self.env.endpoint(), info["address"])

    def sync_tunnel(self, force: bool) -> None:
        """The VXLAN port on the bridge, flooding to every other member's tunnel end: made
        when the network has another member, checked in the kernel when the members changed
        (or `force`: the bridge may have been made afresh)."""
        lab = self.env.lab_networks
        if self._info is None or lab is None:
            return
        me = host_name()
        peers = {m["endpoint"] for m in lab.members(self.lab) if m["host"] != me and m["endpoint"]}
        if not force and peers == self._peers:
            return
        if not peers and self._peers is None:
            self._peers = peers
            return  # alone on it: no tunnel
        local = self.env.endpoint()
        if local is None:
            if self._peers != peers:
                log.warning("lab network %s: other hosts are on it (%s) but this one has no address they reach "
                            "(start it with --listen ADDRESS)", self.lab, ", ".join(sorted(peers)))
            self._peers = peers
            return
        tunnel.ensure(self.tunnel, vni(self.lab), local, self.bridge)
        added, removed = tunnel.set_peers(self.tunnel, peers - {local})
        if added or removed:
            log.info("lab network %s: tunnel %s to %s", self.lab, self.tunnel, ", ".join(sorted(peers)) or "none")
        self._peers = peers

    # ---- servers' addresses ------------------------------------------------------------
    def allocate(self, spec: Spec, info: dict) -> str:
        """The server's address: requested, kept from before (rebuild), or the first free one.

        Every container gets a static address (podman would otherwise hand out a new one at
        each start), held in the store's address table (`env.addresses`, keyed by the lab
        network's name: this host's podman network's, or the one it joins) until the server is
        deleted; the `undercloud.ip` label shows it."""
        from undercloud.store.addresses import AddressTaken, NoFreeAddress

        subnet = ipaddress.ip_network(info["subnet"])
        ours = {info["gateway"], info.get("address", info["gateway"])}  # the undercloud's on this network
        want = next((n.get("fixed_ip") for n in spec.networks if n.get("fixed_ip")), None) or spec.state.get("ip")
        if want:
            if ipaddress.ip_address(want) not in subnet or want in ours:
                raise RealiserError(f"fixed_ip {want} is not a free address of the lab network {subnet} "
                                    f"({' and '.join(sorted(ours))} {'is' if len(ours) == 1 else 'are'} the "
                                    "undercloud's)")
            if want in virtual_ips(info["subnet"]):
                raise RealiserError(f"fixed_ip {want} is kept for virtual IPs on the lab network {subnet} "
                                    f"({', '.join(virtual_ips(info['subnet']))})")
        self._adopt_labelled()
        try:
            if want:
                ip = self.env.addresses.claim(self.lab, spec.id, exact=want)
            else:
                # never the gateway, nor an overcloud's VIP (keepalived may hold one)
                kept = {*ours, *virtual_ips(info["subnet"])}
                ip = self.env.addresses.claim(self.lab, spec.id,
                                              [str(h) for h in subnet.hosts() if str(h) not in kept])
        except AddressTaken as exc:
            raise RealiserError(f"fixed_ip {want} is held by server {exc.holder} on the lab network {subnet}") \
                from None
        except NoFreeAddress:
            raise RealiserError(f"the lab network {subnet} has no free address") from None
        spec.state["ip"] = ip
        return ip

    def _adopt_labelled(self) -> None:
        """Containers made before the address table carry their address only in their
        `undercloud.ip` label: taken into the table once per process, so that an upgrade
        hands none of them out twice."""
        if self._adopted:
            return
        rows = json.loads(hp.podman("ps", "-a", "--format", "json", "--filter",
                                    f"label=undercloud.instance={self.instance}").stdout or "[]")
        for r in rows:
            labels = r.get("Labels") or {}
            if labels.get("undercloud.server") and labels.get("undercloud.ip"):
                self.env.addresses.adopt(self.lab, labels["undercloud.server"], labels["undercloud.ip"])
        self._adopted = True

    def address_of(self, inspected: dict) -> str | None:
        """A container's address on this network, from its `podman container inspect` data."""
        return ((inspected.get("NetworkSettings", {}).get("Networks") or {}).get(self.network) or {}).get("IPAddress")
