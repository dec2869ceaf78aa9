"""The realiser interface: how a server of one hypervisor type becomes a running machine.

One module per hypervisor type in this package (container.py, vm.py, baremetal.py,
openstack.py), each with one `Realiser` subclass setting `hypervisor_type` to its name in
undercloud/server_types.py (where the layers that may not import realisers read the names);
`realisers()` finds them, so adding a type touches its module and that list. The servers
service (service.py) owns the server records, flavors, image choice, placement and the
first-boot data; a realiser only turns a `Spec` into a machine and reports on it. Every call
may be repeated after the service died, so each one finds what an earlier call made (name
things after `spec.id` or keep their ids in `spec.state`, which the service persists after
every call).

    create(spec)        start making the machine (may return before it runs: bare metal
                        deploys take minutes); making nothing twice
    status(spec)        a Status: BUILD / ACTIVE / SHUTOFF / ERROR / DELETED, its addresses
                        and, for ERROR, the reason. Polled until ACTIVE after create/rebuild
    power(spec, on)     power on / off (start / stop for containers)
    delete(spec)        remove everything made for the server; gone already is no error
    rebuild(spec)       recreate from `spec.image` keeping `spec.volumes` (when can_rebuild)
    console(spec, n)    the last `n` lines of the serial console or container log

Placement is the service's job: for a realiser with `uses_nodes` (bare metal) the service
claims a node through the scheduler (provisioning/scheduler.py) before `create` and passes
it as `spec.node` (released when create fails early, or after delete); the realiser deploys
onto it through `env.nodes` (the node state machine). Other types get `spec.host`, a
hypervisor host with free capacity.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from undercloud.host.labnet import VIP_HOSTS

BUILD, ACTIVE, SHUTOFF, ERROR, DELETED, REBUILD = "BUILD", "ACTIVE", "SHUTOFF", "ERROR", "DELETED", "REBUILD"


def virtual_ips(subnet: str) -> list[str]:
    """The addresses kept for virtual IPs on the lab network `subnet` (e.g. 10.130.7.0/24).
    Each realiser's `network_info()` offers these; `undercloud deploy` picks one per stack."""
    import ipaddress

    net = ipaddress.ip_network(subnet)
    return [str(net.network_address + n) for n in VIP_HOSTS if n < net.num_addresses - 1]


def check_fixed_ip(ip, where: str) -> str | None:
    """A requested fixed_ip: None when not given, else it must be an IPv4 address."""
    import ipaddress

    from undercloud.errors import InvalidInput

    if not ip:
        return None
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise InvalidInput(f"not an IPv4 address: {ip!r}", where) from None
    return ip


class RealiserError(Exception):
    """A realiser could not do what was asked; the message becomes the server's fault."""


@dataclass
class Env:
    """What realisers may use of the running undercloud (given once, at construction)."""

    home: Any                      # config.Home: .path, .instance (carried by host objects)
    api_port: int                  # the undercloud API port (the same on every address)
    # Ask the undercloud to also serve its API on `host` (same port), for guests on a
    # network that cannot reach loopback. Idempotent; survives restarts when called again.
    listen: Callable[[str], None] = lambda host: None
    # The service's certificate covers `host` too (agent_url), and its CA (PEM) for nodes.
    tls_name: Callable[[str], None] = lambda host: None
    ca: Callable[[], str] = lambda: ""
    nodes: Any = None              # provisioning.nodes.NodeService (bare metal)
    scheduler: Any = None          # provisioning.scheduler.Scheduler (bare metal)
    images: Any = None             # images.store.ImageStore (image content by checksum)
    clouds: Any = None             # provisioning.clouds.Clouds (openstack servers)
    addresses: Any = None          # store.addresses.AddressTable: who holds which lab address
    lab_networks: Any = None       # store.lab_networks.LabNetworks: lab networks spanning hosts
    # Where other hosts reach this worker (its tunnels' end), None when only this host does.
    endpoint: Callable[[], str | None] = lambda: None
    # Servers of another host (several workers on one store): the hosts with a live worker,
    # the live workers on a host, and a request run by one of them, (worker, method, path,
    # JSON body) -> its JSON answer.
    hosts_up: Callable[[], set[str]] = lambda: set()
    workers_on: Callable[[str], list[str]] = lambda host: []
    forward: Callable[[str, str, str, Any], Any] | None = None
    # A server being deleted: refuse its agent's token from now on, before any teardown (the
    # service's ServerMetadata.revoke; its records go when the server is gone).
    revoke_agent: Callable[[str], None] = lambda server_id: None
    # The Pods the deployments of a server declare (ServerMetadata.kube_pods): what a container
    # node's podman proxy lets its agent create (servers/node_proxy.py).
    node_pods: Callable[[str], list] = lambda server_id: []

    def agent_url(self, address: str) -> str:
        """The API as a node reaches it at `address` (over TLS, the certificate covering it)."""
        self.tls_name(address)
        return f"https://{address}:{self.api_port}"


@dataclass
class Spec:
    """One server as a realiser sees it."""

    id: str                        # server UUID (also the agent's server id)
    name: str                      # server name: the hostname
    hypervisor_type: str
    flavor: dict                   # {name, vcpus, ram (MB), disk (GB), properties}
    image: dict                    # image store record {id, name, disk_format, checksum, properties}
    image_path: Path | None        # the image content (image store blob), when stored
    # First-boot data (agent config + server facts): server_id, hostname, url, token, metadata,
    # user_data, user_data_format, networks. `url` is set by `agent_url` before create.
    first_boot: dict
    networks: list[dict]           # requested: [{"network": "ctlplane", "fixed_ip": "192.168.24.10"}]
    volumes: list[dict] = field(default_factory=list)  # persistent: [{"name", "path"}]
    host: dict | None = None       # hypervisor host (container, vm); None for bare metal
    node: dict | None = None       # the claimed node (bare metal)
    # The realiser's own state, persisted by the service; `instance_name` (the container,
    # domain or node name on the host) is shown to users.
    state: dict = field(default_factory=dict)


@dataclass
class Status:
    status: str                                # BUILD, ACTIVE, SHUTOFF, ERROR, DELETED
    addresses: dict[str, list[str]] = field(default_factory=dict)  # network -> [ip, ...]
    reason: str | None = None                  # why ERROR (or what BUILD waits for)
    notes: list[str] = field(default_factory=list)  # caveats to show (e.g. limits not enforced)


class Realiser:
    """Base class: subclass per hypervisor type and override what it supports."""

    hypervisor_type: ClassVar[str] = ""
    disk_formats: ClassVar[tuple[str, ...]] = ()  # image formats it can run
    can_rebuild: ClassVar[bool] = False           # rebuild in place (else an image change replaces)
    uses_nodes: ClassVar[bool] = False            # True: placed on a scheduled node, not a host
    build_timeout: ClassVar[float] = 300.0        # seconds from create to ACTIVE
    remote: ClassVar[bool] = False                # True: another cloud places it (no host here)
    image_hypervisor_type: ClassVar[str] = ""     # the images it runs, when not its own type's

    def __init__(self, env: Env):
        self.env = env  # remote realisers also take the target: openstack:<cloud> -> (env, cloud)

    def flavor(self, name: str) -> dict:
        """A flavor of the place servers go (remote realisers: the cloud's own)."""
        raise RealiserError(f"{self.hypervisor_type} servers use the undercloud's flavors")

    def check_networks(self, networks: list | None) -> list[dict]:
        """The requested networks, checked against the cloud's (remote realisers only: the
        servers service checks the lab network of the others)."""
        raise RealiserError(f"{self.hypervisor_type} servers join the lab network")

    def available(self) -> str | None:
        """None when this host can realise servers of this type, else the reason."""
        return None

    def agent_url(self, spec: Spec) -> str:
        """The undercloud URL as the server's agent reaches it (stable across restarts)."""
        return self.env.agent_url("127.0.0.1")

    def create(self, spec: Spec) -> None:
        raise NotImplementedError

    def status(self, spec: Spec) -> Status:
        raise NotImplementedError

    def power(self, spec: Spec, on: bool) -> None:
        raise RealiserError(f"{self.hypervisor_type} servers cannot be powered on/off")

    def delete(self, spec: Spec) -> None:
        raise NotImplementedError

    def rebuild(self, spec: Spec) -> None:
        raise RealiserError(f"{self.hypervisor_type} servers cannot be rebuilt in place")

    def console(self, spec: Spec, lines: int = 100) -> str:
        return ""

    def startup(self) -> None:
        """The service started and servers of this type exist: re-establish what they need
        from the undercloud (e.g. its listener on their network)."""

    def cleanup(self) -> list[str]:
        """Remove shared host objects (networks...) no server uses any more; returns their names."""
        return []

    def sync_network(self) -> None:
        """Follow the other hosts on this type's lab network (every few seconds): nothing to
        do unless the network spans hosts."""

    def network_info(self) -> dict:
        """The network servers of this type are on, made when missing: {"network" (its key in
        the address table), "subnet", "gateway", "virtual_ips"} (`virtual_ips(subnet)`:
        addresses no server gets, for an overcloud's VIP)."""
        raise RealiserError(f"{self.hypervisor_type} servers have no lab network with virtual IPs here")


_lock = threading.Lock()
_found: dict[str, type[Realiser]] | None = None


def realisers() -> dict[str, type[Realiser]]:
    """hypervisor_type -> Realiser class, from the modules of this package."""
    global _found
    with _lock:
        if _found is None:
            import undercloud.provisioning.servers as pkg

            found: dict[str, type[Realiser]] = {}
            for mod in pkgutil.iter_modules(pkg.__path__):
                # not realisers: this interface, the servers service and its parts, the test one,
                # the container realiser's network
                if mod.name in ("base", "service", "flavors", "hosts", "placement", "image_choice", "first_boot",
                                "forwarding", "leftovers", "fake", "container_net"):
                    continue
                module = importlib.import_module(f"{pkg.__name__}.{mod.name}")
                for obj in vars(module).values():
                    if isinstance(obj, type) and issubclass(obj, Realiser) and obj.hypervisor_type \
                            and obj.__module__ == module.__name__:
                        found[obj.hypervisor_type] = obj
            _found = found
    return _found
