"""Container servers: the node image (`oci`) runs as a system container in podman.

- Container `<instance>-<server name>` (hostname: the server name), labelled with the
  instance and the server id, so a resumed create finds it and two undercloud homes never
  collide; the agent is its main process (SIGINT stops it cleanly: it is PID 1).
- Its own address on the lab network `<instance>-lab`, an internal podman network whose
  bridge carries the undercloud's address, with a second, address-less port (`provider`)
  for an overcloud's Neutron and a VXLAN to the network's other hosts: container_net.py.
- cpu/memory limits from the flavor (`--cpus`, `--memory`); where this host's cgroups
  refuse them the server runs without and says so in its notes.
- First-boot data mounted read-only at /etc/undercloud-agent (config.json, user-data: run
  once before the agent when it is a script); declared persistent volumes are named podman
  volumes, kept by rebuild, removed by delete.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from pathlib import Path

from undercloud import server_types
from undercloud.agent import node_contract
from undercloud.host import podman as hp
from undercloud.host.labnet import LAB_NETWORK
from undercloud.host.run import CommandFailed
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
)
from undercloud.provisioning.servers.container_net import PROVIDER_INTERFACE, ContainerLabNetwork

log = logging.getLogger("undercloud.servers.container")

CONFIG_DIR = "/etc/undercloud-agent"
AGENT = ["python3", "-m", "undercloud.agent", "run", "--config", f"{CONFIG_DIR}/config.json"]
# At the first start only, user data that is a script runs before the agent (as cloud-init
# runs it on a VM); then the shell becomes the agent (exec), which stays the main process.
FIRST_BOOT = ("ud=/etc/undercloud-agent/user-data; done=/var/lib/undercloud-agent/.user-data-done; "
              'if [ -x "$ud" ] && [ ! -e "$done" ]; then mkdir -p "${done%/*}"; '
              '"$ud" > /var/log/user-data.log 2>&1; echo "user-data: exit $?" >> /var/log/user-data.log; '
              'touch "$done"; fi; exec "$@"')
HOST_SOCKET = Path("/run/podman/podman.sock")      # the host's podman API, when its service runs
LIMIT_ERRORS = ("cgroup", "cpu", "memory", "quota")
# A container node's TCP keepalive (its services' connections share its namespace): an idle
# connection whose peer was lost whole (no reset) ends within 16 s, not Linux's 2 hours;
# haproxy's database connections rely on it (services/haproxy.yaml: tcpka).
NODE_SYSCTLS = ("net.ipv4.tcp_keepalive_time=10", "net.ipv4.tcp_keepalive_intvl=2",
                "net.ipv4.tcp_keepalive_probes=3")


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
        self.net = ContainerLabNetwork(env)  # used with self._lock held
        self._lock = threading.Lock()
        self._creating = 0  # creates in flight: the network must not be removed under them
        # the host's podman API service its nodes' kube hook drives, watched once it is in use
        self.engine_watch: hp.ApiWatch | None = None
        self.proxies: dict[str, node_proxy.NodeProxy] = {}  # node container -> its podman proxy (node_proxy.py)

    def available(self) -> str | None:
        if os.geteuid() != 0:
            return "container servers need root (a bridge with the undercloud's address)"
        why = hp.available()
        if why is None and (backend := hp.network_backend()) != "netavark":
            # the lab network's bridge is named in netavark's config (container_net)
            return f"container servers need podman's netavark network backend, not {backend} (apt-get install netavark)"
        return why

    # ---- the lab network (container_net.py) --------------------------------------------
    def sync_network(self) -> None:
        """Keep the VXLAN port's flood list to the network's other hosts (the status loop)."""
        with self._lock:
            self.net.sync_tunnel(force=False)

    def agent_url(self, spec: Spec) -> str:
        with self._lock:
            info = self.net.ensure()
        return self.env.agent_url(info.get("address", info["gateway"]))

    def network_info(self) -> dict:
        with self._lock:
            info = self.net.ensure()
        return self.net.network_info(info)  # the store read outside the lock, as ever

    def startup(self) -> None:
        with self._lock:
            if self.net.inspect() is not None:
                self.net.ensure()
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
            return self.net.remove()

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
                "--network", f"{self.net.network}:ip={spec.state['ip']}",
                "--network", f"{self.net.provider}:interface_name={PROVIDER_INTERFACE}",
                "--stop-signal", "SIGINT", "--stop-timeout", "5",
                "-v", f"{spec.state['first_boot']}:{CONFIG_DIR}:ro",
                "-e", f"UNDERCLOUD_AGENT_CONFIG={CONFIG_DIR}/config.json",
                "-e", f"{node_contract.NETNS_ENV}={node_contract.netns(name)}"]
        args += ["--label", f"undercloud.ip={spec.state['ip']}"]
        for setting in NODE_SYSCTLS:
            args += ["--sysctl", setting]
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
            self.net.allocate(spec, self.net.ensure())
        self._run(spec, image)

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
            self.net.ensure()  # netavark may have made the bridge afresh: keep our address on it

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
            ip = self.net.address_of(info)
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
                self.net.ensure()
            hp.podman("start", name)
            with self._lock:
                self.net.ensure()
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
            spec.state["ip"] = self.net.address_of(info) or spec.state.get("ip")
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
