"""The virtual lab: empty libvirt VMs with virtual BMCs in front, ready to enrol as nodes.

Design (see docs/architecture.md, "The virtual lab"):
- libvirtd and the lab network are the host's (host/libvirt.py, host/labnet.py), which the
  VM and bare-metal servers use as well: one libvirtd per machine, started in the lab's
  namespace `<instance>-lab` when none runs; the bridge `br-<instance>`, no uplink, never
  leaves the machine.
- Domains `<instance>-node-N` (type qemu = TCG unless host/accel.py's probe boot shows KVM
  works; here KVM hangs guests), qcow2 disks in
  /var/lib/libvirt/images (reachable by the qemu user), MACs derived from the instance.
- BMCs listen on 127.0.0.1 in the host namespace, where the undercloud service runs,
  and reach libvirt through its Unix socket: one sushy-tools Redfish emulator for all
  nodes (basic auth, restricted to this lab's domains), or one process of IPMI BMCs
  (undercloud.lab.ipmi_bmc), one UDP port per node.
- `--boot-mode uefi`: the domains boot OVMF (Debian's `ovmf`, 4 MB flash, no Secure Boot)
  with a copy of its variable store per domain, which `down` removes with the domain; the
  Redfish emulator reports UEFI for them, and the instackenv.json gives each node the
  capability `boot_mode:uefi` (Ironic's spelling).
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

from undercloud.agent.files import write_atomic
from undercloud.config import Home
from undercloud.errors import Conflict
from undercloud.host import dnsmasq
from undercloud.host.accel import accelerator
from undercloud.host.accel import cached as accel_cached
from undercloud.host.labnet import LabNetwork, lab_state_file
from undercloud.host.libvirt import (
    IMAGES,
    LIBVIRT_URI,
    HostError,
    available,
    cmdline,
    ensure_libvirtd,
    libvirtd_pid,
    media_pool,
    pid_alive,
    virsh,
    wait_for,
)
from undercloud.host.run import run
from undercloud.provisioning.drivers import BOOT_MODES

USER = "admin"
OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")  # Debian's ovmf: UEFI without Secure Boot
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")  # the variable store each domain gets a copy of
NVRAM = Path("/var/lib/libvirt/qemu/nvram")
LabError = HostError  # what the lab refuses, and what the host could not do for it


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> list[tuple[int, list[str]]]:
    """(pid, argv) of every process but this one."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                out.append((int(entry.name), raw.rstrip(b"\0").decode(errors="replace").split("\0")))
    return out


def _same_netns(a: str | Path, b: str | Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


LEFTOVERS_SHOWN = 6  # `up`'s one line names this many leftovers, then counts the rest


def _accel_line(accel: dict | None) -> str:
    if not accel:
        return "not probed yet (decided at `lab up`)"
    return f"{accel['type']} ({'TCG: ' if accel['type'] == 'qemu' else ''}{accel['reason']})"


class Lab:
    def __init__(self, home: Home | None = None):
        self.home = home or Home.current()
        self.dir = self.home.path / "lab"
        self.instance = self.home.instance
        self.net = LabNetwork(self.instance)
        self.netns = self.net.netns
        self.bridge = self.net.bridge
        self.host_link = self.net.host_link
        self.state_file = lab_state_file(self.home)
        self.instackenv = self.dir / "instackenv.json"

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict) -> None:
        write_atomic(self.state_file, json.dumps(state, indent=2))

    def mac(self, index: int) -> str:
        h = hashlib.sha256(self.instance.encode()).digest()
        return f"52:54:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}:{index:02x}"

    def domain(self, index: int) -> str:
        return f"{self.instance}-node-{index}"

    # --------------------------------------------------------------- network
    @property
    def subnet(self) -> str:
        return self.net.subnet

    def _record(self, state: dict) -> Any:
        """`record(key, value)` for the host's adapters: into this lab's state, saved at once."""
        def record(key: str, value: Any) -> None:
            state[key] = value
            self._save(state)
        return record

    # ------------------------------------------------------------------- VMs
    def _domain_xml(self, name: str, disk: Path, mac: str, memory_mb: int, domain_type: str = "qemu",
                    boot_mode: str = "bios") -> str:
        firmware = ""
        if boot_mode == "uefi":  # libvirt copies the template into the per-domain store at first start
            firmware = (f"<loader readonly='yes' type='pflash'>{OVMF_CODE}</loader>"
                        f"<nvram template='{OVMF_VARS}'>{NVRAM / (name + '_VARS.fd')}</nvram>")
        return f"""<domain type='{domain_type}'>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mb}</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type>{firmware}<boot dev='network'/><boot dev='hd'/></os>
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
            xml.write_text(self._domain_xml(name, disk, entry["mac"], memory_mb, state["accel"]["type"],
                                            state.get("boot_mode", "bios")))
            if virsh("domuuid", name, check=False, timeout=30).returncode == 0:  # ours, left by a lost lab
                virsh("destroy", name, check=False, timeout=30)
                virsh("undefine", "--nvram", name, check=False, timeout=30)
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
        write_atomic(htpasswd, f"{USER}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt()).decode()}\n")
        conf = self.dir / "sushy-emulator.conf"
        uuids = [d["uuid"] for d in state["domains"]]
        pool = self._ensure_media_pool(state)
        conf.write_text(
            f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
            f"SUSHY_EMULATOR_LIBVIRT_URI = '{LIBVIRT_URI}'\nSUSHY_EMULATOR_AUTH_FILE = '{htpasswd}'\n"
            f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {uuids!r}\nSUSHY_EMULATOR_STORAGE_POOL = '{pool}'\n"
            # a boot mode set through Redfish gets the lab's OVMF (the emulator's default is another build)
            f"SUSHY_EMULATOR_BOOT_LOADER_MAP = {{'UEFI': {{'x86_64': '{OVMF_CODE}'}}, 'Legacy': {{'x86_64': None}}}}\n"
            f"SUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '{OVMF_VARS}'\n"
        )
        log = self.dir / "bmc.log"
        pid = self._spawn([sys.executable, "-c", "from sushy_tools.emulator.main import main; main()",
                           "--config", str(conf)], log)
        state["bmc"] = {"type": "redfish", "pid": pid, "port": port, "config": str(conf)}
        self._save(state)

        def ready() -> bool:
            if not pid_alive(pid):
                raise LabError(f"the Redfish emulator exited at start; see {log}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return True
            except OSError:
                return False

        wait_for("the Redfish emulator", ready, log=log)

    def media_pool(self) -> tuple[str, Path]:
        return media_pool(self.instance)

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
        write_atomic(conf, json.dumps({  # 0600 from creation: it holds the BMC password
            "username": USER, "password": password, "libvirt_uri": LIBVIRT_URI, "ready_file": str(ready_file),
            "bmcs": [{"domain": d["name"], "port": p} for d, p in zip(state["domains"], ports)],
        }))
        log = self.dir / "bmc.log"
        pid = self._spawn([sys.executable, "-m", "undercloud.lab.ipmi_bmc", str(conf)], log)
        state["bmc"] = {"type": "ipmi", "pid": pid, "ports": ports, "config": str(conf)}
        self._save(state)

        def ready() -> bool:
            if not pid_alive(pid):
                raise LabError(f"the IPMI BMCs exited at start; see {log}")
            return ready_file.exists()

        wait_for("the IPMI BMCs", ready, log=log)

    def _write_instackenv(self, state: dict, password: str) -> None:
        bmc = state["bmc"]
        nodes = []
        for i, d in enumerate(state["domains"]):
            node = {"name": d["name"], "pm_user": USER, "pm_password": password,
                    "ports": [{"address": d["mac"]}], "cpu": 1, "memory": state["memory_mb"],
                    "disk": state["disk_gb"], "arch": "x86_64"}
            if state.get("boot_mode", "bios") != "bios":
                node["capabilities"] = f"boot_mode:{state['boot_mode']}"
            if bmc["type"] == "redfish":
                node.update(pm_type="redfish", pm_addr="http://127.0.0.1", pm_port=bmc["port"],
                            pm_system_id=d["uuid"])
            else:
                node.update(pm_type="ipmi", pm_addr="127.0.0.1", pm_port=bmc["ports"][i])
            nodes.append(node)
        self.instackenv.touch(mode=0o600)
        self.instackenv.write_text(json.dumps({"nodes": nodes}, indent=2) + "\n")

    # ------------------------------------------------------------- leftovers
    def _stray_processes(self) -> list[tuple[int, str]]:
        """Processes of an earlier lab of this home's path that no state names: its BMCs
        (their config is in the lab's directory), qemus on its disks (a libvirtd gone
        before them), and a network boot dnsmasq its pid file no longer names."""
        dhcp = self.home.path / "netboot" / "dhcp"
        tracked = dnsmasq.running_pid(dhcp)
        bmc = (self.state().get("bmc") or {}).get("pid")
        found = []
        for pid, argv in _processes():
            if pid in (tracked, bmc):
                continue
            program, args = Path(argv[0]).name, " ".join(argv[1:])
            if (f"{self.dir}/sushy-emulator.conf" in args and "sushy_tools" in args) or (
                    f"{self.dir}/ipmi-bmc.json" in args and "undercloud.lab.ipmi_bmc" in args):
                found.append((pid, "lab BMC"))
            elif program.startswith("qemu-system") and f"{IMAGES}/{self.instance}-node-" in args:
                found.append((pid, "qemu of a lab node"))
            elif program == "dnsmasq" and f"{dhcp}/" in args:
                found.append((pid, "network boot dnsmasq"))
        return found

    def leftovers(self) -> list[str]:
        """What an earlier lab of this home's path (one path, one instance name) left on the
        host that its state no longer records (a killed run, a home removed and made again)
        and that would make `up` fail obscurely: domains and disks of its node names ("Is
        another process using the image"), processes on them, and a namespace of its name
        that is not libvirtd's (its bridge one libvirt cannot see). A namespace libvirtd
        uses, and the bridge in it, are taken over as they are."""
        found = []
        ns = Path(f"/run/netns/{self.netns}")
        lv = libvirtd_pid()
        stale = lv is not None and ns.exists() and not _same_netns(ns, f"/proc/{lv}/ns/net")
        if stale:
            found.append(f"network namespace {self.netns} (not libvirtd's: libvirt cannot see its bridge)")
        if (stale or not ns.exists()) and run(["ip", "link", "show", self.host_link], check=False).returncode == 0:
            found.append(f"host link {self.host_link} (its peer not on a bridge libvirt sees)")
        if lv is not None:
            listed = virsh("list", "--all", "--name", check=False, timeout=30).stdout.split()
            found += [f"domain {n}" for n in sorted(listed) if n.startswith(f"{self.instance}-node-")]
        found += [f"disk {p}" for p in sorted(IMAGES.glob(f"{self.instance}-node-*.qcow2"))]
        found += [f"{what} (pid {pid})" for pid, what in self._stray_processes()]
        return found

    # ------------------------------------------------------------------ verbs
    def up(self, nodes: int, bmc: str = "redfish", memory_mb: int = 512, disk_gb: int = 10,
           boot_mode: str = "bios") -> dict:
        reason = available()
        if reason:
            raise LabError(f"cannot make the virtual lab here: {reason}")
        if bmc not in ("redfish", "ipmi"):
            raise LabError(f"unknown BMC type {bmc!r} (redfish or ipmi)")
        if boot_mode not in BOOT_MODES:
            raise LabError(f"unknown boot mode {boot_mode!r} ({' or '.join(BOOT_MODES)})")
        if boot_mode == "uefi" and not (OVMF_CODE.exists() and OVMF_VARS.exists()):
            raise LabError(f"--boot-mode uefi needs {OVMF_CODE} and {OVMF_VARS} (apt-get install ovmf)")
        if not 1 <= nodes <= 64:
            raise LabError(f"--nodes must be between 1 and 64, got {nodes}")
        if self.state():
            raise Conflict(f"the lab of this home is already up ({self.state_file}); run `undercloud lab down` first")
        found = self.leftovers()
        if found:
            more = f" and {len(found) - LEFTOVERS_SHOWN} more" if len(found) > LEFTOVERS_SHOWN else ""
            raise Conflict(f"an earlier lab of this home's path (instance {self.instance}) left "
                           f"{', '.join(found[:LEFTOVERS_SHOWN])}{more}; remove them with `undercloud lab down`")
        accel = accelerator()  # KVM only when a probe boot shows it works (at most ~15 s, once per machine)
        self.dir.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {"instance": self.instance, "netns": self.netns, "memory_mb": memory_mb,
                                 "disk_gb": disk_gb, "bmc_type": bmc, "boot_mode": boot_mode, "created_at": time.time(),
                                 "accel": {"type": accel.type, "reason": accel.reason}}
        self._save(state)
        try:
            self.net.up(self._record(state))
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
        bridge_ok = self.net.bridge_up()
        bmc_ok = pid_alive(bmc.get("pid")) and bmc.get("config", "") in cmdline(bmc.get("pid") or 0)
        healthy = ns_ok and bridge_ok and bmc_ok and all(d["state"] != "missing" for d in domains)
        return {
            "status": "up" if healthy else "degraded", "instance": self.instance, "netns": self.netns,
            "bridge": f"{self.bridge} ({self.subnet}.1/24)" + ("" if bridge_ok else " MISSING"),
            "bmc": f"{bmc.get('type')} on 127.0.0.1:" + (str(bmc.get("port")) if bmc.get("type") == "redfish"
                                                          else ",".join(map(str, bmc.get("ports", []))))
                   + (f" (pid {bmc.get('pid')})" if bmc_ok else " NOT RUNNING"),
            "libvirtd": f"pid {libvirtd_pid()}" if libvirtd_pid() else "NOT RUNNING",
            "accel": _accel_line(state.get("accel")), "boot_mode": state.get("boot_mode", "bios"),
            "nodes": domains, "instackenv": state.get("instackenv"),
        }

    def down(self) -> list[str]:
        """Remove everything this lab made; returns what was removed. Safe to repeat."""
        state = self.state()
        removed: list[str] = []
        bmc = state.get("bmc") or {}
        pid = bmc.get("pid")
        if pid and pid_alive(pid) and bmc.get("config", "?") in cmdline(pid):
            _stop(pid)
            removed.append(f"{bmc.get('type')} BMC process {pid}")
        for pid, what in self._stray_processes():  # an earlier run's, no state naming them
            if pid_alive(pid):
                _stop(pid)
                removed.append(f"{what} (pid {pid})")
        names = {d["name"] for d in state.get("domains", [])}
        if names and libvirtd_pid() is None:  # defined domains outlive libvirtd: start it to remove them
            ensure_libvirtd(self.netns)
        if libvirtd_pid():  # also domains of ours a crashed `up` did not record
            listed = virsh("list", "--all", "--name", check=False, timeout=30).stdout.split()
            names |= {n for n in listed if n.startswith(f"{self.instance}-node-")}
            for name in sorted(names):
                virsh("destroy", name, check=False, timeout=30)
                if virsh("undefine", "--nvram", name, check=False, timeout=30).returncode == 0:
                    removed.append(f"domain {name}")  # with its UEFI variable store, if any
        disks = {Path(d["disk"]) for d in state.get("domains", [])}
        for disk in sorted(disks | set(IMAGES.glob(f"{self.instance}-node-*.qcow2"))):
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
        # Network boot's DHCP (provisioning/servers/baremetal_netboot.py) serves on the bridge.
        if dnsmasq.stop(self.home.path / "netboot" / "dhcp"):
            removed.append("network boot DHCP (dnsmasq)")
        removed += self.net.remove()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        return removed
