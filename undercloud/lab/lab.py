"""The virtual lab: empty libvirt VMs with virtual BMCs in front, ready to enrol as nodes.

Design (see docs/architecture.md, "The virtual lab"):
- libvirtd is one daemon per machine. When none runs, the lab creates its network
  namespace `<instance>-lab` and starts virtlogd and libvirtd inside it with
  `nsenter --net=/run/netns/NAME` (not `ip netns exec`, which remounts /sys), libvirtd
  under lab/reaper.py so the qemus it daemonizes are reaped at once. When one
  runs already, the lab uses it and puts its bridge in libvirtd's namespace, since that is
  where libvirtd creates the VMs' taps. Either way the lab network (bridge
  `br-<instance>`, no uplink) never leaves the machine.
- Domains `<instance>-node-N` (type qemu = TCG unless lab/accel.py's probe boot shows KVM
  works; here KVM hangs guests), qcow2 disks in
  /var/lib/libvirt/images (reachable by the qemu user), MACs derived from the instance.
- BMCs listen on 127.0.0.1 in the host namespace, where the undercloud service runs,
  and reach libvirt through its Unix socket: one sushy-tools Redfish emulator for all
  nodes (basic auth, restricted to this lab's domains), or one process of IPMI BMCs
  (undercloud.lab.ipmi_bmc), one UDP port per node.
- `lab/state.json` in UNDERCLOUD_HOME records everything made, as it is made, so `down`
  removes exactly that even after a failed `up`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from undercloud.config import Home
from undercloud.errors import Conflict, UndercloudError
from undercloud.host.run import run
from undercloud.lab.accel import KVM_DEVICE, accelerator
from undercloud.lab.accel import cached as accel_cached

LIBVIRT_URI = "qemu:///system"
IMAGES = Path("/var/lib/libvirt/images")
START_TIMEOUT = 30.0
# A libvirtd with no capabilities cache (its first start on a machine) probes qemu before it
# answers anyone: 70 s measured on a 2-core host.
LIBVIRTD_FIRST_ANSWER = 240.0
LIBVIRTD_LOG = Path("/var/log/libvirt/undercloud-libvirtd.log")  # one libvirtd per machine
USER = "admin"
HOST_ADDRESS = 254  # the host's address on the lab network (servers take .100-.249)


class LabError(UndercloudError):
    pass


def available() -> str | None:
    """None when a lab can be made here, else why not (for test skips and errors)."""
    if os.geteuid() != 0:
        return "the virtual lab needs root (network namespaces, libvirtd)"
    for tool, pkg in (("libvirtd", "libvirt-daemon-system"), ("virsh", "libvirt-clients"),
                      ("qemu-system-x86_64", "qemu-system-x86"), ("qemu-img", "qemu-utils"),
                      ("ip", "iproute2"), ("nsenter", "util-linux")):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install {pkg})"
    for mod, pkg in (("sushy_tools", "sushy-tools"), ("virtualbmc", "virtualbmc"), ("libvirt", "libvirt-python")):
        try:
            __import__(mod)
        except ImportError:
            return f"python module {mod} is missing (pip install {pkg})"
    return None


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def libvirtd_pid() -> int | None:
    for pidfile in (Path("/run/libvirtd.pid"), Path("/var/run/libvirtd.pid")):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if _pid_alive(pid) and "libvirtd" in _cmdline(pid):
            return pid
    return None


VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")


def virtlogd_running(path: Path = VIRTLOGD_SOCKET) -> bool:
    """The host's virtlogd answers on its socket (libvirtd needs it to start domains). A
    virtlogd process seen in /proc may be another's: an overcloud's nova_libvirt container
    runs one with its own /run/libvirt, which this host's libvirtd cannot use."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(what: str, check, timeout: float = START_TIMEOUT, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    hint = f"; see {log}" if log else ""
    raise LabError(f"{what} did not come up within {timeout:.0f} s{hint}")


def _libvirtd_answers() -> bool:
    try:
        return virsh("version", check=False, timeout=30).returncode == 0
    except UndercloudError:  # still busy: a timeout is an answer of "not yet"
        return False


def virsh(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    return run(["virsh", "-c", LIBVIRT_URI, *args], check=check, timeout=timeout)


def _route_devices(routes: str) -> list[str]:
    """The devices `ip -o route show` lines send traffic to."""
    return [line.split(" dev ", 1)[1].split()[0] for line in routes.splitlines() if " dev " in line]


def _accel_line(accel: dict | None) -> str:
    if not accel:
        return "not probed yet (decided at `lab up`)"
    return f"{accel['type']} ({'TCG: ' if accel['type'] == 'qemu' else ''}{accel['reason']})"


class Lab:
    def __init__(self, home: Home | None = None):
        self.home = home or Home.current()
        self.dir = self.home.path / "lab"
        self.instance = self.home.instance
        self.netns = f"{self.instance}-lab"
        self.bridge = f"br-{self.instance}"
        self.state_file = self.dir / "state.json"
        self.instackenv = self.dir / "instackenv.json"

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def mac(self, index: int) -> str:
        h = hashlib.sha256(self.instance.encode()).digest()
        return f"52:54:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:{index:02x}"

    def domain(self, index: int) -> str:
        return f"{self.instance}-node-{index}"

    # --------------------------------------------------------------- network
    def _ns(self, path: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(["nsenter", f"--net={path}", *argv], check=check, timeout=60)

    def _ensure_libvirtd(self, state: dict) -> str:
        """Start virtlogd/libvirtd in our namespace unless libvirtd runs; returns its netns path."""
        pid = libvirtd_pid()
        if pid is None:
            ns = f"/run/netns/{self.netns}"
            if not Path(ns).exists():
                run(["ip", "netns", "add", self.netns])
            state["netns_created"] = True
            self._save(state)
            self._ns(ns, "ip", "link", "set", "lo", "up")
            if not virtlogd_running():
                self._ns(ns, "virtlogd", "-d")
            # libvirtd in the foreground under our reaper (see lab/reaper.py), detached
            LIBVIRTD_LOG.parent.mkdir(parents=True, exist_ok=True)
            # With guests on TCG, libvirtd does not see /dev/kvm: where it exists but its qemu
            # user may not open it (here: root:ssl-cert 0660), libvirt found its capability cache
            # "outdated" at every lookup (KVM at probe time, not now) and probed qemu again:
            # 1 s for each define or start, 10 s on a busy host, long enough for a lab BMC's
            # client to give up. In a mount namespace of its own, nothing else is touched.
            hide = ["unshare", "--mount", "--propagation", "private"] if accelerator().type == "qemu" else []
            with open(LIBVIRTD_LOG, "ab") as out:
                subprocess.Popen([*hide, "nsenter", f"--net={ns}", sys.executable, "-m", "undercloud.lab.reaper",
                                  *(["--hide", KVM_DEVICE] if hide else []), "libvirtd"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, cwd="/")
            _wait_for("libvirtd", lambda: libvirtd_pid() is not None and _libvirtd_answers(),
                      timeout=LIBVIRTD_FIRST_ANSWER, log=LIBVIRTD_LOG)
            pid = libvirtd_pid()
            state["libvirtd_started"] = pid
        else:
            _wait_for("libvirtd", _libvirtd_answers, timeout=LIBVIRTD_FIRST_ANSWER, log=LIBVIRTD_LOG)
            if not virtlogd_running():  # it died, or never ran beside a libvirtd started elsewhere
                run(["virtlogd", "-d"], timeout=60)
        _wait_for("virtlogd", virtlogd_running)
        state["libvirtd_netns"] = f"/proc/{pid}/ns/net"
        # Keep a name on libvirtd's namespace: /proc/PID paths vanish with the process.
        if not Path(f"/run/netns/{self.netns}").exists():
            Path("/run/netns").mkdir(exist_ok=True)
            Path(f"/run/netns/{self.netns}").touch()
            run(["mount", "--bind", f"/proc/{pid}/ns/net", f"/run/netns/{self.netns}"])
            state["netns_created"] = True
        self._save(state)
        return f"/run/netns/{self.netns}"

    @property
    def subnet(self) -> str:
        """This lab's /24 ("192.168.N"). Every lab's bridge lives in libvirtd's one namespace,
        where two bridges with one subnet break each other's routes: so each home has its
        own, derived from its instance (stable: agents keep their addresses)."""
        h = hashlib.sha256(self.instance.encode()).digest()
        return f"192.168.{24 + int.from_bytes(h[:2], 'big') % 200}"

    def _ensure_bridge(self, ns: str, state: dict) -> None:
        cidr = f"{self.subnet}.0/24"
        for other in _route_devices(self._ns(ns, "ip", "-o", "-4", "route", "show", cidr).stdout):
            if other != self.bridge:
                raise LabError(f"subnet {cidr} of this lab is taken by {other} in libvirtd's namespace "
                               f"(another undercloud home's lab?); remove that lab first")
        if self._ns(ns, "ip", "link", "show", self.bridge, check=False).returncode != 0:
            self._ns(ns, "ip", "link", "add", self.bridge, "type", "bridge")
        state["bridge"] = self.bridge
        self._save(state)
        self._ns(ns, "ip", "link", "set", self.bridge, "up")
        addrs = self._ns(ns, "ip", "-o", "addr", "show", "dev", self.bridge).stdout
        if f"{self.subnet}.1/24" not in addrs:
            self._ns(ns, "ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        self._ensure_host_link(ns)

    @property
    def host_link(self) -> str:
        return f"{self.instance}-h"

    def _ensure_host_link(self, ns: str) -> None:
        """Put the host on the lab network (HOST_ADDRESS, a veth whose other end is a port
        of the bridge), as TripleO's undercloud sat on its ctlplane: what runs on nodes
        (the overcloud's virtual IP, a node's ssh) is then reachable from here, and only
        through this link, never through the host's default route."""
        if os.stat(ns).st_ino == os.stat("/proc/self/ns/net").st_ino:
            return  # libvirtd (and so the bridge) is in the host's namespace: reachable already
        cidr = f"{self.subnet}.0/24"
        for dev in _route_devices(run(["ip", "-o", "-4", "route", "show", cidr]).stdout):
            if dev != self.host_link:
                raise LabError(f"subnet {cidr} of this lab is routed to {dev} on this host: "
                               f"cannot put the host on the lab network")
        peer = f"{self.instance}-n"
        if run(["ip", "link", "show", self.host_link], check=False).returncode != 0:
            run(["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", peer,
                 "netns", Path(ns).name])
        self._ns(ns, "ip", "link", "set", peer, "master", self.bridge, "up")
        if f"{self.subnet}.{HOST_ADDRESS}/24" not in run(["ip", "-o", "addr", "show", "dev", self.host_link]).stdout:
            run(["ip", "addr", "add", f"{self.subnet}.{HOST_ADDRESS}/24", "dev", self.host_link])
        run(["ip", "link", "set", self.host_link, "up"])

    def network(self) -> tuple[str, str]:
        """The lab network without `lab up` (for VM servers and the undercloud's lab address):
        libvirtd running, its namespace named, the bridge up. Returns (netns path, bridge
        address). Records nothing in the lab's state, so `lab up` still works after it."""
        if (reason := available()) is not None:
            raise LabError(f"no lab network here: {reason}")
        scratch: dict = {}
        self._save = lambda _state: None  # type: ignore[method-assign]  # this instance only
        ns = self._ensure_libvirtd(scratch)
        self._ensure_bridge(ns, scratch)
        return ns, f"{self.subnet}.1"

    # ------------------------------------------------------------------- VMs
    def _domain_xml(self, name: str, disk: Path, mac: str, memory_mb: int, domain_type: str = "qemu") -> str:
        return f"""<domain type='{domain_type}'>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mb}</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='network'/><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/><source file='{disk}'/><target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <source bridge='{self.bridge}'/><mac address='{mac}'/><model type='virtio'/>
    </interface>
    <serial type='pty'/><console type='pty'/>
  </devices>
</domain>
"""

    def _make_domains(self, count: int, memory_mb: int, disk_gb: int, state: dict) -> None:
        IMAGES.mkdir(parents=True, exist_ok=True)
        state.setdefault("domains", [])
        for i in range(count):
            name = self.domain(i)
            disk = IMAGES / f"{name}.qcow2"
            entry = {"name": name, "disk": str(disk), "mac": self.mac(i)}
            state["domains"].append(entry)
            self._save(state)
            run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), f"{disk_gb}G"], timeout=60)
            xml = self.dir / f"{name}.xml"
            xml.write_text(self._domain_xml(name, disk, entry["mac"], memory_mb, state["accel"]["type"]))
            if virsh("domuuid", name, check=False, timeout=30).returncode == 0:  # ours, left by a lost lab
                virsh("destroy", name, check=False, timeout=30)
                virsh("undefine", name, check=False, timeout=30)
            virsh("define", str(xml))
            entry["uuid"] = virsh("domuuid", name).stdout.strip()
            self._save(state)

    # ------------------------------------------------------------------ BMCs
    def _spawn(self, argv: list[str], log: Path) -> int:
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    start_new_session=True, cwd=self.dir)
        return proc.pid

    def _start_redfish(self, state: dict, password: str) -> None:
        import bcrypt

        port = _free_port()
        htpasswd = self.dir / "htpasswd"
        htpasswd.write_text(f"{USER}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}\n")
        htpasswd.chmod(0o600)
        conf = self.dir / "sushy-emulator.conf"
        uuids = [d["uuid"] for d in state["domains"]]
        pool = self._ensure_media_pool(state)
        conf.write_text(
            f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
            f"SUSHY_EMULATOR_LIBVIRT_URI = '{LIBVIRT_URI}'\nSUSHY_EMULATOR_AUTH_FILE = '{htpasswd}'\n"
            f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {uuids!r}\nSUSHY_EMULATOR_STORAGE_POOL = '{pool}'\n"
        )
        log = self.dir / "bmc.log"
        pid = self._spawn([sys.executable, "-c", "from sushy_tools.emulator.main import main; main()",
                           "--config", str(conf)], log)
        state["bmc"] = {"type": "redfish", "pid": pid, "port": port, "config": str(conf)}
        self._save(state)

        def ready() -> bool:
            if not _pid_alive(pid):
                raise LabError(f"the Redfish emulator exited at start; see {log}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                return False

        _wait_for("the Redfish emulator", ready, log=log)

    def media_pool(self) -> tuple[str, Path]:
        return f"{self.instance}-media", IMAGES / f"{self.instance}-media"

    def _ensure_media_pool(self, state: dict) -> str:
        """The libvirt storage pool the Redfish emulator uploads virtual media into."""
        name, path = self.media_pool()
        path.mkdir(parents=True, exist_ok=True)
        if virsh("pool-info", name, check=False, timeout=30).returncode != 0:
            virsh("pool-define-as", name, "dir", "--target", str(path))
        state["media_pool"] = name
        self._save(state)
        virsh("pool-start", name, check=False)
        return name

    def _start_ipmi(self, state: dict, password: str) -> None:
        ports = [_free_port(socket.SOCK_DGRAM) for _ in state["domains"]]
        conf = self.dir / "ipmi-bmc.json"
        ready_file = self.dir / "ipmi-bmc.ready"
        ready_file.unlink(missing_ok=True)
        conf.write_text(json.dumps({
            "username": USER, "password": password, "libvirt_uri": LIBVIRT_URI, "ready_file": str(ready_file),
            "bmcs": [{"domain": d["name"], "port": p} for d, p in zip(state["domains"], ports)],
        }))
        conf.chmod(0o600)
        log = self.dir / "bmc.log"
        pid = self._spawn([sys.executable, "-m", "undercloud.lab.ipmi_bmc", str(conf)], log)
        state["bmc"] = {"type": "ipmi", "pid": pid, "ports": ports, "config": str(conf)}
        self._save(state)

        def ready() -> bool:
            if not _pid_alive(pid):
                raise LabError(f"the IPMI BMCs exited at start; see {log}")
            return ready_file.exists()

        _wait_for("the IPMI BMCs", ready, log=log)

    def _write_instackenv(self, state: dict, password: str) -> None:
        bmc = state["bmc"]
        nodes = []
        for i, d in enumerate(state["domains"]):
            node = {"name": d["name"], "pm_user": USER, "pm_password": password,
                    "ports": [{"address": d["mac"]}], "cpu": 1, "memory": state["memory_mb"],
                    "disk": state["disk_gb"], "arch": "x86_64"}
            if bmc["type"] == "redfish":
                node.update(pm_type="redfish", pm_addr="http://127.0.0.1", pm_port=bmc["port"],
                            pm_system_id=d["uuid"])
            else:
                node.update(pm_type="ipmi", pm_addr="127.0.0.1", pm_port=bmc["ports"][i])
            nodes.append(node)
        self.instackenv.touch(mode=0o600)
        self.instackenv.write_text(json.dumps({"nodes": nodes}, indent=2) + "\n")

    # ------------------------------------------------------------------ verbs
    def up(self, nodes: int, bmc: str = "redfish", memory_mb: int = 512, disk_gb: int = 10) -> dict:
        reason = available()
        if reason:
            raise LabError(f"cannot make the virtual lab here: {reason}")
        if bmc not in ("redfish", "ipmi"):
            raise LabError(f"unknown BMC type {bmc!r} (redfish or ipmi)")
        if not 1 <= nodes <= 64:
            raise LabError(f"--nodes must be between 1 and 64, got {nodes}")
        if self.state():
            raise Conflict(f"the lab of this home is already up ({self.state_file}); run `undercloud lab down` first")
        accel = accelerator()  # KVM only when a probe boot shows it works (at most ~15 s, once per machine)
        self.dir.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {"instance": self.instance, "netns": self.netns, "memory_mb": memory_mb,
                                 "disk_gb": disk_gb, "bmc_type": bmc, "created_at": time.time(),
                                 "accel": {"type": accel.type, "reason": accel.reason}}
        self._save(state)
        try:
            ns = self._ensure_libvirtd(state)
            self._ensure_bridge(ns, state)
            self._make_domains(nodes, memory_mb, disk_gb, state)
            password = secrets.token_urlsafe(12)
            (self._start_redfish if bmc == "redfish" else self._start_ipmi)(state, password)
            self._write_instackenv(state, password)
            state["instackenv"] = str(self.instackenv)
            self._save(state)
        except BaseException:
            self.down()
            raise
        return self.status()

    def status(self) -> dict:
        state = self.state()
        if not state:
            found = accel_cached()
            return {"status": "down", "instance": self.instance,
                    "accel": _accel_line(found._asdict() if found else None)}
        bmc = state.get("bmc") or {}
        domains = []
        for d in state.get("domains", []):
            r = virsh("domstate", d["name"], check=False, timeout=10)
            domains.append({"name": d["name"], "uuid": d.get("uuid"), "mac": d["mac"],
                            "state": r.stdout.strip() if r.returncode == 0 else "missing"})
        ns_ok = Path(f"/run/netns/{self.netns}").exists()
        bridge_ok = ns_ok and self._ns(f"/run/netns/{self.netns}", "ip", "link", "show", self.bridge,
                                       check=False).returncode == 0
        bmc_ok = _pid_alive(bmc.get("pid")) and bmc.get("config", "") in _cmdline(bmc.get("pid") or 0)
        healthy = ns_ok and bridge_ok and bmc_ok and all(d["state"] != "missing" for d in domains)
        return {
            "status": "up" if healthy else "degraded", "instance": self.instance, "netns": self.netns,
            "bridge": f"{self.bridge} ({self.subnet}.1/24)" + ("" if bridge_ok else " MISSING"),
            "bmc": f"{bmc.get('type')} on 127.0.0.1:" + (str(bmc.get("port")) if bmc.get("type") == "redfish"
                                                          else ",".join(map(str, bmc.get("ports", []))))
                   + (f" (pid {bmc.get('pid')})" if bmc_ok else " NOT RUNNING"),
            "libvirtd": f"pid {libvirtd_pid()}" if libvirtd_pid() else "NOT RUNNING",
            "accel": _accel_line(state.get("accel")),
            "nodes": domains, "instackenv": state.get("instackenv"),
        }

    def down(self) -> list[str]:
        """Remove everything this lab made; returns what was removed. Safe to repeat."""
        state = self.state()
        removed: list[str] = []
        bmc = state.get("bmc") or {}
        pid = bmc.get("pid")
        if pid and _pid_alive(pid) and bmc.get("config", "?") in _cmdline(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
            removed.append(f"{bmc.get('type')} BMC process {pid}")
        names = {d["name"] for d in state.get("domains", [])}
        if names and libvirtd_pid() is None:  # defined domains outlive libvirtd: start it to remove them
            self._ensure_libvirtd({})
        if libvirtd_pid():  # also domains of ours a crashed `up` did not record
            listed = virsh("list", "--all", "--name", check=False, timeout=30).stdout.split()
            names |= {n for n in listed if n.startswith(f"{self.instance}-node-")}
            for name in sorted(names):
                virsh("destroy", name, check=False, timeout=30)
                if virsh("undefine", name, check=False, timeout=30).returncode == 0:
                    removed.append(f"domain {name}")
        for d in state.get("domains", []):
            disk = Path(d["disk"])
            if disk.exists():
                disk.unlink()
                removed.append(f"disk {disk}")
        pool, pool_dir = self.media_pool()
        if state.get("media_pool") and libvirtd_pid():
            virsh("pool-destroy", pool, check=False, timeout=30)
            if virsh("pool-undefine", pool, check=False, timeout=30).returncode == 0:
                removed.append(f"storage pool {pool}")
        if pool_dir.exists():
            shutil.rmtree(pool_dir)
            removed.append(f"virtual media in {pool_dir}")
        if run(["ip", "link", "del", self.host_link], check=False).returncode == 0:
            removed.append(f"host link {self.host_link}")
        ns = f"/run/netns/{self.netns}"
        if Path(ns).exists():
            if self._ns(ns, "ip", "link", "show", self.bridge, check=False).returncode == 0:
                self._ns(ns, "ip", "link", "del", self.bridge, check=False)
                removed.append(f"bridge {self.bridge}")
            run(["ip", "netns", "del", self.netns], check=False)
            removed.append(f"network namespace {self.netns}")
        if self.dir.exists():
            shutil.rmtree(self.dir)
        return removed
