"""The lab network of an undercloud home: bridge `br-<instance>` (no uplink) in libvirtd's
network namespace `<instance>-lab`, the undercloud at .1 on it, the host at .254 through a
veth. The virtual lab's nodes and the VM and bare-metal servers live on it; it never leaves
the machine.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from undercloud.host import libvirt
from undercloud.host.libvirt import HostError, nsenter
from undercloud.host.run import run

# Who takes which host number of a lab /24, declared once (the ports' pool, the servers'
# range, the virtual IPs and this host's link are all read from here):
UNDERCLOUD_ADDRESS = 1          # the undercloud, on the bridge: the nodes' gateway and API address
PORT_HOSTS = range(10, 100)     # the stacks' ports on ctlplane (resources/neutron.py, store/networks.py)
SERVER_HOSTS = range(100, 250)  # VM and bare-metal servers (vm_net, through the address table)
VIP_HOSTS = range(250, 254)     # overclouds' virtual IPs, held by keepalived: never a server's
HOST_ADDRESS = 254              # this host's own link to the lab network
# The lab network's name, TripleO's for its provisioning network: the network servers ask
# for, the key of their addresses, the config drive's network and the stacks' own (neutron.py).
LAB_NETWORK = "ctlplane"


def lab_state_file(home) -> Path:
    """What `lab up` made, in the home (host/labnet.py and the lab both read it): while it
    exists the lab owns the network, and only `lab down` removes it."""
    return home.path / "lab" / "state.json"


def route_devices(routes: str) -> list[str]:
    """The devices `ip -o route show` lines send traffic to."""
    return [line.split(" dev ", 1)[1].split()[0] for line in routes.splitlines() if " dev " in line]


class LabNetwork:
    def __init__(self, instance: str):
        self.instance = instance
        self.netns = f"{instance}-lab"
        self.bridge = f"br-{instance}"
        # its key in the address table (store/addresses.py): servers', VIPs' and ctlplane ports' addresses
        self.address_key = self.bridge
        self.host_link = f"{instance}-h"

    @property
    def subnet(self) -> str:
        """This home's /24 ("192.168.N"). Every lab's bridge lives in libvirtd's one namespace,
        where two bridges with one subnet break each other's routes: so each home has its
        own, derived from its instance (stable: agents keep their addresses)."""
        h = hashlib.sha256(self.instance.encode()).digest()
        return f"192.168.{24 + int.from_bytes(h[:2], 'big') % 200}"

    def up(self, record: Callable[[str, Any], None] = lambda key, value: None) -> tuple[str, str]:
        """libvirtd running, its namespace named, the bridge up and the host on it. Returns
        (netns path, the undercloud's address on the bridge); `record(key, value)` is told
        what was made, as `libvirt.ensure_libvirtd` tells it."""
        if (reason := libvirt.available()) is not None:
            raise HostError(f"no lab network here: {reason}")
        ns = libvirt.ensure_libvirtd(self.netns, record)
        self._ensure_bridge(ns, record)
        return ns, f"{self.subnet}.{UNDERCLOUD_ADDRESS}"

    def _ensure_bridge(self, ns: str, record: Callable[[str, Any], None]) -> None:
        cidr = f"{self.subnet}.0/24"
        for other in route_devices(nsenter(ns, "ip", "-o", "-4", "route", "show", cidr).stdout):
            if other != self.bridge:
                raise HostError(f"subnet {cidr} of this lab is taken by {other} in libvirtd's namespace "
                                f"(another undercloud home's lab?); remove that lab first")
        if nsenter(ns, "ip", "link", "show", self.bridge, check=False).returncode != 0:
            nsenter(ns, "ip", "link", "add", self.bridge, "type", "bridge")
        record("bridge", self.bridge)
        nsenter(ns, "ip", "link", "set", self.bridge, "up")
        addrs = nsenter(ns, "ip", "-o", "addr", "show", "dev", self.bridge).stdout
        if f"{self.subnet}.{UNDERCLOUD_ADDRESS}/24" not in addrs:
            nsenter(ns, "ip", "addr", "add", f"{self.subnet}.{UNDERCLOUD_ADDRESS}/24", "dev", self.bridge)
        self._ensure_host_link(ns)

    def _ensure_host_link(self, ns: str) -> None:
        """Put the host on the lab network (HOST_ADDRESS, a veth whose other end is a port
        of the bridge), as TripleO's undercloud sat on its ctlplane: what runs on nodes
        (the overcloud's virtual IP, a node's ssh) is then reachable from here, and only
        through this link, never through the host's default route."""
        if os.stat(ns).st_ino == os.stat("/proc/self/ns/net").st_ino:
            return  # libvirtd (and so the bridge) is in the host's namespace: reachable already
        cidr = f"{self.subnet}.0/24"
        for dev in route_devices(run(["ip", "-o", "-4", "route", "show", cidr]).stdout):
            if dev != self.host_link:
                raise HostError(f"subnet {cidr} of this lab is routed to {dev} on this host: "
                                f"cannot put the host on the lab network")
        peer = f"{self.instance}-n"
        if run(["ip", "link", "show", self.host_link], check=False).returncode != 0:
            run(["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", peer,
                 "netns", Path(ns).name])
        nsenter(ns, "ip", "link", "set", peer, "master", self.bridge, "up")
        if f"{self.subnet}.{HOST_ADDRESS}/24" not in run(["ip", "-o", "addr", "show", "dev", self.host_link]).stdout:
            run(["ip", "addr", "add", f"{self.subnet}.{HOST_ADDRESS}/24", "dev", self.host_link])
        run(["ip", "link", "set", self.host_link, "up"])

    def bridge_up(self) -> bool:
        ns = f"/run/netns/{self.netns}"
        return Path(ns).exists() and nsenter(ns, "ip", "link", "show", self.bridge, check=False).returncode == 0

    def remove(self) -> list[str]:
        """The host link, the bridge and the namespace's name; returns what was removed."""
        removed = []
        if run(["ip", "link", "del", self.host_link], check=False).returncode == 0:
            removed.append(f"host link {self.host_link}")
        ns = f"/run/netns/{self.netns}"
        if Path(ns).exists():
            if nsenter(ns, "ip", "link", "show", self.bridge, check=False).returncode == 0:
                nsenter(ns, "ip", "link", "del", self.bridge, check=False)
                removed.append(f"bridge {self.bridge}")
            run(["ip", "netns", "del", self.netns], check=False)
            removed.append(f"network namespace {self.netns}")
        return removed
