"""`vm` servers: a libvirt domain (TCG, or KVM where host/accel.py's probe boot shows it works) on the lab network.

Per server, all named `<instance>-server-<server id>` (libvirt's domain UUID is the server
id) and kept in /var/lib/libvirt/images, where the qemu user can read them:
  NAME-base.qcow2     the image (a hard link to the image store's content, or a copy)
  NAME.qcow2          the server's disk: a copy-on-write overlay on the base, flavor-sized
  NAME-config.iso     first-boot data as a config drive (vm_configdrive.py), attached as a CD
  NAME-console.log    the serial console (`server console`)
plus one lab address (vm_net.Addresses, in the store's address table) and a MAC derived from the server id. The node
image's agent unit runs `undercloud.agent.first_boot` first, which applies the
config drive (hostname, static address, agent configuration); the agent then reaches the
undercloud at its lab address (Env.listen), the bridge's `.1`.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from xml.sax.saxutils import quoteattr

from undercloud import server_types
from undercloud.errors import UndercloudError
from undercloud.host.accel import accelerator
from undercloud.host.labnet import LAB_NETWORK, UNDERCLOUD_ADDRESS, LabNetwork, lab_state_file
from undercloud.host.libvirt import IMAGES, libvirtd_pid, virsh
from undercloud.host.libvirt import available as libvirt_available
from undercloud.host.run import run
from undercloud.provisioning.servers import vm_configdrive
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
from undercloud.provisioning.servers.vm_net import (
    GUEST_RELAY,
    Addresses,
    lab_network,
    serve_api,
    server_mac,
)

SHUTDOWN_GRACE = 20.0  # seconds a guest gets to power off cleanly before it is cut


def _virsh(*args: str, check: bool = True, timeout: float = 60):
    try:
        return virsh(*args, check=check, timeout=timeout)
    except UndercloudError as exc:
        raise RealiserError(f"libvirt: {exc.message}") from None


def fixed_ip(spec: Spec) -> str | None:
    for n in spec.networks or []:
        if n.get("network", LAB_NETWORK) == LAB_NETWORK and n.get("fixed_ip"):
            return n["fixed_ip"]
    return None


class VMRealiser(Realiser):
    hypervisor_type = server_types.VM
    disk_formats = ("qcow2",)
    can_rebuild = True
    build_timeout = 600.0  # a TCG boot to the agent takes ~30-90 s on a shared machine

    # ---- names and files --------------------------------------------------------------
    def name(self, spec: Spec) -> str:
        return f"{self.env.home.instance}-server-{spec.id}"

    def files(self, spec: Spec) -> dict[str, Path]:
        n = self.name(spec)
        return {"base": IMAGES / f"{n}-base.qcow2", "disk": IMAGES / f"{n}.qcow2",
                "iso": IMAGES / f"{n}-config.iso", "console": IMAGES / f"{n}-console.log"}

    def _network(self) -> tuple[str, str, str]:
        return lab_network(self.env.home)

    def _addresses(self, gateway: str) -> Addresses:
        return Addresses(self.env.home, gateway, self.env.addresses)

    # ---- interface -------------------------------------------------------------------
    def available(self) -> str | None:
        reason = libvirt_available()
        if reason:
            return reason
        for tool, pkg in (("xorriso", "xorriso"), ("qemu-img", "qemu-utils")):
            if not shutil.which(tool):
                return f"{tool} is not installed (apt-get install {pkg})"
        return None

    def network_info(self) -> dict:
        from undercloud.provisioning.network import lab_network_info

        return lab_network_info(self.env.home)

    def agent_url(self, spec: Spec) -> str:
        """The undercloud on the lab network: the bridge's address, the API's port."""
        ns, _bridge, gateway = self._network()
        self.env.listen(GUEST_RELAY)  # what the relay leads to: guests' routes only
        serve_api(ns, gateway, self.env.api_port)
        return self.env.agent_url(gateway)

    def startup(self) -> None:
        """Servers of this type exist: serve the API on the lab network again."""
        ns, _bridge, gateway = self._network()
        self.env.listen(GUEST_RELAY)  # what the relay leads to: guests' routes only
        serve_api(ns, gateway, self.env.api_port)

    def create(self, spec: Spec) -> None:
        name, f = self.name(spec), self.files(spec)
        if _virsh("dominfo", name, check=False).returncode == 0:
            if spec.state.get("power") != "off" and self._domstate(name) != "running":
                _virsh("start", name, check=False)
            return
        _ns, bridge, gateway = self._network()
        address = self._addresses(gateway).take(spec.id, fixed_ip(spec))
        mac = server_mac(spec.id)
        spec.state.update(domain=name, instance_name=name, address=address, mac=mac, bridge=bridge,
                          gateway=gateway)
        self._make_disk(spec, f)
        vm_configdrive.make(spec, mac, address, f["iso"])
        f["console"].touch(mode=0o600)
        xml = f["disk"].with_suffix(".xml")
        xml.write_text(self.domain_xml(spec, bridge, mac))
        try:
            _virsh("define", str(xml))
        finally:
            xml.unlink(missing_ok=True)
        _virsh("start", name, timeout=120)
        spec.state["power"] = "on"

    def _make_disk(self, spec: Spec, f: dict[str, Path]) -> None:
        if spec.image.get("disk_format") not in self.disk_formats:
            raise RealiserError(f"image {spec.image.get('name')} is {spec.image.get('disk_format')}; "
                                f"vm servers boot qcow2 images")
        src = spec.image_path
        if src is None or not Path(src).exists():
            raise RealiserError(f"the content of image {spec.image.get('name')} ({spec.image.get('id')}) "
                                f"is missing from the image store")
        IMAGES.mkdir(parents=True, exist_ok=True)
        for p in (f["base"], f["disk"]):
            p.unlink(missing_ok=True)
        try:
            os.link(src, f["base"])  # same file system: free, and the store's file is never written
        except OSError:
            shutil.copyfile(src, f["base"])
        size_gb = int((spec.flavor or {}).get("disk") or 0)
        virtual = _virtual_size(f["base"])
        size = max(size_gb * 1024 ** 3, virtual)
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(f["base"]), str(f["disk"]),
             str(size)], timeout=60)
        spec.state["image_id"] = spec.image.get("id")

    def domain_xml(self, spec: Spec, bridge: str, mac: str) -> str:
        f = self.files(spec)
        flavor = spec.flavor or {}
        ram = max(int(flavor.get("ram") or 512), 256)
        vcpus = max(int(flavor.get("vcpus") or 1), 1)
        q = quoteattr
        return f"""<domain type={q(accelerator().type)}>
  <name>{self.name(spec)}</name>
  <uuid>{spec.id}</uuid>
  <memory unit='MiB'>{ram}</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/><source file={q(str(f["disk"]))}/><target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/><source file={q(str(f["iso"]))}/><target dev='hdc' bus='ide'/><readonly/>
    </disk>
    <interface type='bridge'>
      <source bridge={q(bridge)}/><mac address={q(mac)}/><model type='virtio'/>
    </interface>
    <serial type='file'><source path={q(str(f["console"]))} append='on'/><target port='0'/></serial>
  </devices>
</domain>
"""

    def _domstate(self, name: str) -> str | None:
        r = _virsh("domstate", name, check=False, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else None

    def status(self, spec: Spec) -> Status:
        name = spec.state.get("domain") or self.name(spec)
        state = self._domstate(name)
        addresses = {LAB_NETWORK: [spec.state["address"]]} if spec.state.get("address") else {}
        if state is None:
            return Status(DELETED, reason=f"domain {name} does not exist")
        if state == "running":
            return Status(ACTIVE, addresses)
        if state in ("shut off", "shutoff"):
            if spec.state.get("power") == "off":
                return Status(SHUTOFF, addresses)
            return Status(ERROR, addresses, reason=f"domain {name} stopped on its own "
                                                   f"(see `server console`)")
        if state == "crashed":
            return Status(ERROR, addresses, reason=f"domain {name} crashed")
        return Status(BUILD, addresses, reason=f"domain {name} is {state}")

    def power(self, spec: Spec, on: bool) -> None:
        name = self.name(spec)
        if on:
            spec.state["power"] = "on"
            if self._domstate(name) != "running":
                _virsh("start", name, timeout=120)
            return
        spec.state["power"] = "off"
        if self._domstate(name) == "running":
            _virsh("shutdown", name, check=False)
            deadline = time.monotonic() + SHUTDOWN_GRACE
            while time.monotonic() < deadline and self._domstate(name) == "running":
                time.sleep(0.5)
            if self._domstate(name) == "running":
                _virsh("destroy", name, check=False)

    def delete(self, spec: Spec) -> None:
        name = self.name(spec)
        if self._domstate(name) is not None:
            _virsh("destroy", name, check=False)
            r = _virsh("undefine", name, check=False)
            if r.returncode != 0 and self._domstate(name) is not None:
                raise RealiserError(f"cannot remove domain {name}: {r.stderr.strip()[:200]}")
        for p in self.files(spec).values():
            p.unlink(missing_ok=True)
        self.env.addresses.release(spec.id)

    def rebuild(self, spec: Spec) -> None:
        """A new disk from `spec.image` (the address, MAC and domain stay); the config drive is
        made again (the service may have rotated the token)."""
        name, f = self.name(spec), self.files(spec)
        if self._domstate(name) is None:
            self.create(spec)
            return
        _virsh("destroy", name, check=False)
        self._make_disk(spec, f)
        vm_configdrive.make(spec, spec.state["mac"], spec.state["address"], f["iso"])
        _virsh("start", name, timeout=120)
        spec.state["power"] = "on"

    def console(self, spec: Spec, lines: int = 100) -> str:
        return tail(self.files(spec)["console"], lines)

    def cleanup(self) -> list[str]:
        """The lab network once no server holds a lab address and no lab is up (`lab up`
        owns it then): the host link, the bridge and the namespace's name go, as `lab down`
        removes them."""
        net = LabNetwork(self.env.home.instance)
        if (lab_state_file(self.env.home).exists() or libvirtd_pid() is None
                or Addresses(self.env.home, f"{net.subnet}.{UNDERCLOUD_ADDRESS}", self.env.addresses).held()):
            return []
        return net.remove()


def _virtual_size(path: Path) -> int:
    import json

    info = json.loads(run(["qemu-img", "info", "--output=json", "-U", str(path)], timeout=60).stdout)
    return int(info["virtual-size"])


def tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a (possibly large) text file; '' when it does not exist."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 1024 * 1024))
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    return "\n".join(text.splitlines()[-lines:])
