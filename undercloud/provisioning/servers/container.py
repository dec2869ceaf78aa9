"""Container servers: the node image (`oci`) runs as a system container in podman.

- Container `<instance>-<server name>` (hostname: the server name), labelled with the
  instance and the server id, so a resumed create finds it and two undercloud homes never
  collide; the agent is its main process (SIGINT stops it cleanly: it is PID 1).
- Its own address on the lab network `<instance>-lab`: an *internal* podman network (no
  NAT, no default route, nothing leaves the machine) with a subnet derived from the
  instance and kept in `servers/container-network.json`, so it is the same after restarts
  and after the network was removed and made again.
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
- cpu/memory limits from the flavor (`--cpus`, `--memory`); where this host's cgroups
  refuse them the server runs without and says so in its notes.
- First-boot data mounted read-only at /etc/undercloud-agent (config.json, user-data: run
  once before the agent when it is a script); declared persistent volumes are named podman
  volumes, kept by rebuild, removed by delete.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import os
import shutil
import threading
from pathlib import Path

from undercloud import server_types
from undercloud.agent import node_contract
from undercloud.agent.files import write_atomic
from undercloud.config import host_name
from undercloud.host import podman as hp
from undercloud.host import tunnel
from undercloud.host.labnet import LAB_NETWORK
from undercloud.host.run import CommandFailed, run
from undercloud.provisioning.servers import node_proxy
from undercloud.provisioning.servers.base import (
    ACTIVE,
    BUILD,
    DELETED,
    ERROR,
    SHUTOFF,
    Realiser,
    RealiserError,
    Spec,
    Status,
    virtual_ips,
)
from undercloud.store.lab_networks import vni

log = logging.getLogger("undercloud.servers.container")

CONFIG_DIR = "/etc/undercloud-agent"
AGENT = ["python3", "-m", "undercloud.agent", "run", "--config", f"{CONFIG_DIR}/config.json"]
# At the first start only, user data that is a script runs before the agent (as cloud-init
# runs it on a VM); then the shell becomes the agent (exec), which stays the main process.
FIRST_BOOT = ("ud=/etc/undercloud-agent/user-data; done=/var/lib/undercloud-agent/.user-data-done; "
              'if [ -x "$ud" ] && [ ! -e "$done" ]; then mkdir -p "${done%/*}"; '
              '"$ud" > /var/log/user-data.log 2>&1; echo "user-data: exit $?" >> /var/log/user-data.log; '
              'touch "$done"; fi; exec "$@"')
NETWORKS_DIR = Path("/etc/containers/networks")  # netavark network configs (root podman)
HOST_SOCKET = Path("/run/podman/podman.sock")      # the host's podman API, when its service runs
LIMIT_ERRORS = ("cgroup", "cpu", "memory", "quota")
PROVIDER_INTERFACE = "provider"  # each node's address-less port on the lab bridge


def _label(spec: Spec) -> str:
    return f"undercloud.server={spec.id}"


class ContainerRealiser(Realiser):
    hypervisor_type = server_types.CONTAINER
    disk_formats = ("oci",)
    can_rebuild = True
    # a hypervisor host under emulation fetches the image and loads it into its podman first
    # (~45 s of a first server there on this machine's TCG VM)
    build_timeout = 300.0

    def __init__(self, env):
        super().__init__(env)
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
        self._lock = threading.Lock()
        self._creating = 0  # creates in flight: the network must not be removed under them
        # the host's podman API service its nodes' kube hook drives, watched once it is in use
        self.engine_watch: hp.ApiWatch | None = None
        self.proxies: dict[str, node_proxy.NodeProxy] = {}  # node container -> its podman proxy (node_proxy.py)
        self._net_info: dict | None = None
        self._adopted = False  # the labelled addresses of older containers are in the table

    def available(self) -> str | None:
        if os.geteuid() != 0:
            return "container servers need root (a bridge with the undercloud's address)"
        why = hp.available()
        if why is None and (backend := hp.network_backend()) != "netavark":
            # the lab network's bridge is named in netavark's config (_name_bridge)
            return f"container servers need podman's netavark network backend, not {backend} (apt-get install netavark)"
        return why

    # ---- the lab network -----------------------------------------------------------
    @property
    def _net_file(self) -> Path:
        return Path(self.env.home.path) / "servers" / "container-network.json"

    def _saved_network(self) -> dict:
        try:
            saved = json.loads(self._net_file.read_text())
        except (OSError, ValueError):
            return {}
        return saved if isinstance(saved, dict) else {}

    def _save_network(self, info: dict) -> None:
        """Keep the network's subnet and addresses for the next start: replaced whole (a
        crash leaves the old file or the new one, never a part: files.write_atomic)."""
        if self._saved_network() != info:
            write_atomic(self._net_file, json.dumps(info), 0o644)

    def _subnet_choices(self):
        saved = self._saved_network().get("subnet")
        if saved:
            yield saved
        h = hashlib.sha256(self.instance.encode()).digest()
        for i in range(64):  # 10.128.0.0/9 space, a /24 per instance
            yield f"10.{128 + (h[0] + i) % 128}.{(h[1] + 7 * i) % 256}.0/24"

    def _network(self) -> dict:
        """Make the lab network, its bridge and address, and the listener (idempotent).

        Once known in this process only the bridge address is re-asserted (one `ip` call):
        netavark removes the bridge with the last container and makes it afresh."""
        if self._net_info is not None and all((NETWORKS_DIR / f"{n}.json").exists()
                                              for n in (self.network, self.provider)):
            self._bridge_address(self._net_info)
            if self._peers:  # shared with other hosts: the tunnel on the bridge (netavark may have made it afresh)
                self._sync_tunnel(force=True)
            return self._net_info
        shared = self._shared()
        own = self._own_address(shared) if shared else None
        net = self._inspect_network()
        if net is not None and shared is not None and net["subnets"][0]["subnet"] != shared["subnet"]:
            raise RealiserError(f"podman network {self.network} has subnet {net['subnets'][0]['subnet']}, but the lab "
                                f"network {self.lab} it joins has {shared['subnet']}: remove it (podman network rm "
                                f"{self.network}) with its containers")
        if net is None:
            last = ""
            for subnet in [shared["subnet"]] if shared else self._subnet_choices():
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
            net = self._inspect_network()
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
        self._save_network(info)
        self._bridge_address(info)
        self.env.listen(info["address"])
        self._record(info)
        self._net_info = info
        self._sync_tunnel(force=True)
        return info

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

    def sync_network(self) -> None:
        """Keep the VXLAN port's flood list to the network's other hosts (the status loop)."""
        with self._lock:
            self._sync_tunnel(force=False)

    def _sync_tunnel(self, force: bool) -> None:
        """The VXLAN port on the bridge, flooding to every other member's tunnel end: made
        when the network has another member, checked in the kernel when the members changed
        (or `force`: the bridge may have been made afresh)."""
        lab = self.env.lab_networks
        if self._net_info is None or lab is None:
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

    def _inspect_network(self) -> dict | None:
        proc = hp.podman("network", "inspect", self.network, check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)
        return data[0] if data else None

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

    def agent_url(self, spec: Spec) -> str:
        with self._lock:
            info = self._network()
        return self.env.agent_url(info.get("address", info["gateway"]))

    def network_info(self) -> dict:
        with self._lock:
            info = self._network()
        hosts = self.env.lab_networks.members(self.lab) if self.env.lab_networks is not None else []
        return {"network": self.lab, **info, "virtual_ips": virtual_ips(info["subnet"]),
                "provider_interface": PROVIDER_INTERFACE, "hosts": hosts}

    def startup(self) -> None:
        with self._lock:
            if self._inspect_network() is not None:
                self._network()
        self._watch()  # container servers exist (why this runs): their nodes rely on the API service
        # their podman proxies (the socket a node mounts is this process's: made again)
        rows = json.loads(hp.podman("ps", "-a", "--format", "json", "--filter",
                                    f"label=undercloud.instance={self.instance}", check=False).stdout or "[]")
        for row in rows:
            server_id = (row.get("Labels") or {}).get("undercloud.server")
            if server_id and row.get("Names"):
                self._proxy(row["Names"][0], server_id)

    def _proxy(self, name: str, server_id: str) -> node_proxy.NodeProxy:
        """Node `name`'s podman proxy, started when it is not running: the host's API as the
        Pods of its server's deployments allow (servers/node_proxy.py)."""
        with self._lock:
            proxy = self.proxies.get(name)
            if proxy is None:
                images = self.env.images

                def known_image(sha256: str) -> bool:
                    return images is not None and any(i.get("checksum") == sha256 for i in images.list())

                policy = node_proxy.Policy(name, str(HOST_SOCKET), lambda: self.env.node_pods(server_id), known_image)
                proxy = self.proxies[name] = node_proxy.NodeProxy(self._proxy_dir(name), policy)
            return proxy

    def _proxy_dir(self, name: str) -> Path:
        return Path(self.env.home.path) / "servers" / "podman-proxy" / name

    def _drop_proxy(self, name: str) -> None:
        with self._lock:
            proxy = self.proxies.pop(name, None)
        if proxy is not None:
            proxy.stop()
        shutil.rmtree(self._proxy_dir(name), ignore_errors=True)

    def _watch(self) -> None:
        if self.engine_watch is None:
            self.engine_watch = hp.ApiWatch(HOST_SOCKET, image=self._node_image, log=log)

    def _node_image(self) -> str | None:
        """An image here that the API service's check may start (`true`): a node's."""
        out = hp.podman("ps", "-a", "--format", "{{.ImageID}}", "--filter",
                        f"label=undercloud.instance={self.instance}", check=False, timeout=60).stdout.split()
        return out[0] if out else None

    def watch_engine(self) -> None:
        """One look at the podman API service (host/podman.py's ApiWatch), every few seconds."""
        if self.engine_watch is not None:
            for proxy in list(self.proxies.values()):  # a node's report of a broken service
                proxy.pass_report(self.engine_watch.reported)
            self.engine_watch.look()

    def cleanup(self) -> list[str]:
        """Remove the lab network and bridge when no container of this instance is left."""
        with self._lock:
            if self._creating:
                return []
            left = hp.podman("ps", "-a", "-q", "--filter", f"label=undercloud.instance={self.instance}").stdout
            if left.strip():
                return []
            removed = []
            self._net_info = None
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

    # ---- containers ----------------------------------------------------------------
    def _find(self, spec: Spec) -> dict | None:
        out = hp.podman("ps", "-a", "--format", "json", "--filter", f"label={_label(spec)}").stdout
        rows = json.loads(out or "[]")
        return rows[0] if rows else None

    def _name(self, spec: Spec) -> str:
        if spec.state.get("container"):
            return spec.state["container"]
        name = node_contract.node_name(self.instance, spec.name)
        other = hp.podman("container", "inspect", "--format", "{{index .Config.Labels \"undercloud.server\"}}",
                          name, check=False)
        if other.returncode == 0 and other.stdout.strip() != spec.id:
            name = f"{name}-{spec.id[:8]}"  # two servers of one name in one undercloud
        return name

    def _image(self, spec: Spec) -> str:
        ref = (spec.image.get("properties") or {}).get("podman_image")
        if not ref:
            raise RealiserError(f"image {spec.image.get('name')} ({spec.image.get('id')}) has no podman_image "
                                f"property: build it with `undercloud image build {spec.image.get('name')} --type oci`")
        if not hp.image_exists(ref):
            if not spec.image_path or not Path(spec.image_path).exists():
                raise RealiserError(f"{ref} is not in podman and the image store has no content for it")
            out = hp.podman("load", "-q", "-i", str(spec.image_path), timeout=900).stdout
            loaded = out.strip().rsplit(" ", 1)[-1]
            if loaded and loaded != ref and not hp.image_exists(ref):
                hp.podman("tag", loaded, ref)
        return ref

    def _volume(self, spec: Spec, vol: dict) -> str:
        return f"{self.instance}-{spec.id[:8]}-{vol['name']}"

    def _run_args(self, spec: Spec, name: str, image: str, limits: bool) -> list[str]:
        args = ["run", "-d", "--name", name, "--hostname", spec.name,
                "--label", f"undercloud.instance={self.instance}", "--label", _label(spec),
                "--label", f"undercloud.server_name={spec.name}",
                "--network", f"{self.network}:ip={spec.state['ip']}",
                "--network", f"{self.provider}:interface_name={PROVIDER_INTERFACE}",
                "--stop-signal", "SIGINT", "--stop-timeout", "5",
                "-v", f"{spec.state['first_boot']}:{CONFIG_DIR}:ro",
                "-e", f"UNDERCLOUD_AGENT_CONFIG={CONFIG_DIR}/config.json",
                "-e", f"{node_contract.NETNS_ENV}={node_contract.netns(name)}"]
        args += ["--label", f"undercloud.ip={spec.state['ip']}"]
        if limits:
            args += ["--cpus", str(spec.flavor.get("vcpus") or 1), "--memory", f"{spec.flavor.get('ram') or 512}m"]
        for vol in spec.volumes:
            args += ["-v", f"{self._volume(spec, vol)}:{vol['path']}"]
        # The kube hook drives the host's podman through its API, as far as the node's own
        # proxy lets it (node_proxy.py); the proxy's directory is mounted (not the socket
        # file) so a proxy made again (a service restart) is still reached.
        try:
            hp.api_service(HOST_SOCKET)
            self._watch()
            proxy = self._proxy(name, spec.id)
            args += ["-v", f"{proxy.directory}:/run/podman",
                     "-e", f"CONTAINER_HOST=unix:///run/podman/{node_proxy.SOCKET}"]
        except (RuntimeError, CommandFailed) as exc:
            log.warning("no podman API for the kube hook on %s: %s", name, exc)
        return [*args, image, "sh", "-c", FIRST_BOOT, "first-boot", *AGENT]

    def create(self, spec: Spec) -> None:
        with self._lock:
            self._creating += 1
        try:
            self._create(spec)
        finally:
            with self._lock:
                self._creating -= 1

    def _create(self, spec: Spec) -> None:
        found = self._find(spec)
        if found is not None:  # a resumed create: it exists already
            spec.state["container"] = spec.state["instance_name"] = found["Names"][0]
            self._proxy(found["Names"][0], spec.id)
            if found.get("State") != "running" and not spec.state.get("powered_off"):
                hp.podman("start", spec.state["container"], check=False)
            return
        image = self._image(spec)
        with self._lock:
            info = self._network()
            self._allocate(spec, info)
        self._run(spec, image)

    def _allocate(self, spec: Spec, info: dict) -> str:
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

    def _run(self, spec: Spec, image: str) -> None:
        name = self._name(spec)
        spec.state["container"] = spec.state["instance_name"] = name
        spec.state["first_boot"] = str(Path(self.env.home.path) / "servers" / spec.id / "first-boot")
        for vol in spec.volumes:
            vname = self._volume(spec, vol)
            if hp.podman("volume", "exists", vname, check=False).returncode != 0:
                hp.podman("volume", "create", "--label", f"undercloud.instance={self.instance}",
                          "--label", _label(spec), vname)
        try:
            hp.podman(*self._run_args(spec, name, image, limits=True), timeout=120)
            spec.state.pop("limits_note", None)
        except CommandFailed as exc:
            if not any(w in exc.message.lower() for w in LIMIT_ERRORS):
                hp.podman("rm", "-f", "-t", "0", name, check=False)
                raise RealiserError(exc.message) from None
            # This host's cgroups refuse the limits: run without, and say so.
            hp.podman("rm", "-f", "-t", "0", name, check=False)
            hp.podman(*self._run_args(spec, name, image, limits=False), timeout=120)
            spec.state["limits_note"] = ("cpu/memory limits of the flavor are not enforced: this host's "
                                         f"cgroups refused them ({exc.message})")
        with self._lock:
            self._network()  # netavark may have made the bridge afresh: keep our address on it

    def _inspect(self, spec: Spec) -> dict | None:
        """The container's inspect data: by its name when known (one call), else by label."""
        name = spec.state.get("container")
        if name:
            proc = hp.podman("container", "inspect", name, check=False)
            data = json.loads(proc.stdout or "[]") if proc.returncode == 0 else []
            if data and (data[0]["Config"].get("Labels") or {}).get("undercloud.server") == spec.id:
                return data[0]
        found = self._find(spec)
        if found is None:
            return None
        proc = hp.podman("container", "inspect", found["Names"][0], check=False)
        data = json.loads(proc.stdout or "[]") if proc.returncode == 0 else []
        return data[0] if data else None

    def status(self, spec: Spec) -> Status:
        info = self._inspect(spec)
        if info is None:
            return Status(DELETED)
        name = info["Name"]
        notes = [spec.state["limits_note"]] if spec.state.get("limits_note") else []
        state = info["State"].get("Status")
        if state == "running":
            nets = info.get("NetworkSettings", {}).get("Networks") or {}
            ip = (nets.get(self.network) or {}).get("IPAddress")
            if ip:
                spec.state["ip"] = ip
            return Status(ACTIVE, addresses={LAB_NETWORK: [ip]} if ip else {}, notes=notes)
        if state in ("created", "configured", "initialized"):
            return Status(BUILD, reason=f"container {name} to start", notes=notes)
        if spec.state.get("powered_off"):
            return Status(SHUTOFF, notes=notes)
        tail = hp.podman("logs", "--tail", "3", name, check=False)
        last = (tail.stdout + tail.stderr).strip().splitlines()[-1:] or ["no output"]
        return Status(ERROR, reason=f"container {name} exited (code {info['State'].get('ExitCode')}): {last[0]}",
                      notes=notes)

    def power(self, spec: Spec, on: bool) -> None:
        """The whole node: the node container and the service containers the kube hook
        joined to its network namespace (labelled undercloud.node=NAME), which would
        otherwise run on without it. The node first both ways: off, its agent's watchdog
        would start them again; on, they join its namespace when they start."""
        name = spec.state.get("container") or self._name(spec)
        joined = hp.podman("ps", "-a", "-q", "--filter", node_contract.node_filter(name)).stdout.split()
        if on:
            spec.state["powered_off"] = False
            with self._lock:
                self._network()
            hp.podman("start", name)
            with self._lock:
                self._network()
            if joined:
                hp.podman("start", *joined, timeout=120)
        else:
            spec.state["powered_off"] = True
            hp.podman("stop", "-t", "5", name)
            if joined:
                hp.podman("stop", "-t", "5", *joined, timeout=120)

    def delete(self, spec: Spec) -> None:
        found = self._find(spec)
        names = {found["Names"][0]} if found is not None else set()
        if found is not None:
            self._remove(found["Names"][0])
        if spec.state.get("container"):
            names.add(spec.state["container"])
        # Its declared volumes, and the service volumes (persistentVolumeClaims) the kube
        # hook made for it (labelled undercloud.node=NAME; kept by rebuild and Pod replacement).
        vols = hp.podman("volume", "ls", "-q", "--filter", f"label={_label(spec)}").stdout.split()
        for name in sorted(names):
            vols += hp.podman("volume", "ls", "-q", "--filter", node_contract.node_filter(name)).stdout.split()
        for v in vols:
            hp.podman("volume", "rm", "-f", v, check=False)
        for name in names:
            self._drop_proxy(name)
        self.env.addresses.release(spec.id)

    def _remove(self, name: str) -> None:
        """The node container and the service containers the kube hook joined to its network
        namespace (labelled undercloud.node=NAME): those first, as a restarting one makes
        `rm --depend` fail."""
        deps = hp.podman("ps", "-a", "-q", "--filter", node_contract.node_filter(name)).stdout.split()
        if deps:
            hp.podman("rm", "-f", "-t", "0", *deps, timeout=120, check=False)
        hp.remove(name, depend=True)

    def rebuild(self, spec: Spec) -> None:
        """Recreate from `spec.image`: the container goes, its named volumes stay."""
        self._image(spec)  # fail before removing anything when the new image is not usable
        info = self._inspect(spec)
        if info is not None:
            ip = ((info.get("NetworkSettings", {}).get("Networks") or {}).get(self.network) or {}).get("IPAddress")
            spec.state["ip"] = ip or spec.state.get("ip")
        found = self._find(spec)
        if found is not None:
            self._remove(found["Names"][0])
        spec.state["powered_off"] = False
        self.create(spec)

    def console(self, spec: Spec, lines: int = 100) -> str:
        found = self._find(spec)
        if found is None:
            raise RealiserError(f"server {spec.name} has no container")
        proc = hp.podman("logs", "--tail", str(lines), found["Names"][0], check=False)
        return proc.stdout + proc.stderr
