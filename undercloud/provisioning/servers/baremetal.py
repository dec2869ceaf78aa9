"""`baremetal` servers: Ironic's direct deploy through the node's BMC.

The service claims an available node (scheduler) and calls `create`, which prepares this
deploy's virtual media (baremetal_media.py: the deploy ramdisk ISO + the request + the
config drive) or, for a node whose boot interface is `pxe`, arms its network boot
(baremetal_netboot.py), and moves the node with the `deploy` verb. From there the node state
machine (provisioning/states.py) drives it:

  deploying       `deploy` (this realiser is the nodes' deploy interface, nodes.DeployInterface,
                  given to the node service in api/context.py): power off, insert
                  the media through Redfish virtual media and boot once from CD (or boot
                  once from the network), power on
  wait call-back  the ramdisk sets its lab address, picks the root device by the node's
                  root_device hints, downloads the image from the image store (Range
                  resume), verifies its sha256, writes it and the config drive, and calls
                  POST /v1/deploy/servers/<id>/callback with this deploy's token
  active          on success the undercloud ejects the media (or disarms), sets boot to disk
                  (persistent) and reboots; the node's agent then checks in
  deploy failed   the ramdisk's error (checksum mismatch...), a BMC error, no call-back
                  within CALLBACK_TIMEOUT, or (network boot) a second request for the boot
                  credentials (`boot_request`), each named in the node's last_error; `undeploy`
                  (what server delete does) recovers the node to available

Per server: <home>/baremetal/<server id>/ (deploy.json: node, token hash; the ISOs while
deploying) and one address of the provisioning network (provisioning/network.py: the
lab's, or undercloud.conf's; vm_net.Addresses). The API is served there (in the lab's
namespace as for VMs, vm_net.serve_api). A node whose driver knows its network (`management.network()`:
a cloud's server, drivers/openstack.py) takes no lab address: the ramdisk and the config
drive use its own address, and the API is also served at the undercloud's address there.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import threading
import time
from pathlib import Path

from undercloud import server_types
from undercloud.agent.files import temp_name, write_atomic
from undercloud.errors import Conflict, NotFound, UndercloudError
from undercloud.host.labnet import LAB_NETWORK
from undercloud.provisioning import drivers, network, states
from undercloud.provisioning.drivers import BootInterface, Driver, DriverError
from undercloud.provisioning.nodes import INSPECT_BY_BMC, INSPECT_BY_RAMDISK, WAIT
from undercloud.provisioning.servers import baremetal_media, vm_configdrive
from undercloud.provisioning.servers.baremetal_boot import BOOT_INTERFACES, RamdiskBoot, eject_quietly
from undercloud.provisioning.servers.baremetal_netboot import BootRefused, NetBoot
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
from undercloud.provisioning.servers.vm import fixed_ip
from undercloud.provisioning.servers.vm_net import (
    GUEST_RELAY,
    Addresses,
    lab_network,
    serve_api,
)

log = logging.getLogger("undercloud.servers.baremetal")

DEPLOY_IMAGE = "deploy-ramdisk"  # the ISO (disk_format iso, hypervisor_type baremetal) booted
# Seconds the node may wait for the ramdisk's call-back (a TCG boot + download + write in
# the virtual lab takes minutes; real machines with slow firmware too).
CALLBACK_TIMEOUT = float(os.environ.get("UNDERCLOUD_DEPLOY_CALLBACK_TIMEOUT", "1200"))
BUSY_WAIT = 180.0  # seconds delete waits for a running deploy step to end


class DeployDenied(UndercloudError):
    """Unknown server or wrong deploy token: the same answer for both."""


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class BaremetalRealiser(Realiser):
    hypervisor_type = server_types.BAREMETAL
    disk_formats = ("qcow2", "raw")
    uses_nodes = True
    build_timeout = CALLBACK_TIMEOUT + 600.0

    def __init__(self, env):
        super().__init__(env)
        self.root = Path(env.home.path) / "baremetal"
        # undercloud.conf's provisioning network, checked once (a mistake stops the service's
        # start, which makes this realiser), else the lab's
        self.configured = network.configured(env.home)
        self.netboot = NetBoot(env.home, env.api_port, self.network)
        self.boots = {name: cls(self.netboot) for name, cls in BOOT_INTERFACES.items()}

    # ---- helpers ---------------------------------------------------------------------
    def _dir(self, server_id: str) -> Path:
        return self.root / server_id

    def _record(self, server_id: str) -> dict:
        try:
            return json.loads((self._dir(server_id) / "deploy.json").read_text())
        except (OSError, ValueError):
            return {}

    def _save_record(self, server_id: str, data: dict) -> None:
        d = self._dir(server_id)
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        write_atomic(d / "deploy.json", json.dumps(data))

    def _node(self, spec: Spec) -> dict | None:
        node_id = spec.state.get("node_id") or (spec.node or {}).get("uuid")
        if not node_id or self.env.nodes is None:
            return None
        try:
            return self.env.nodes.get(node_id)
        except NotFound:
            return None

    def _deploy_image(self) -> dict:
        images = self.env.images
        found = [i for i in images.list(name=DEPLOY_IMAGE) if i["disk_format"] == "iso" and i["status"] == "active"]
        if not found:
            raise RealiserError(f"no {DEPLOY_IMAGE} ISO in the image store: run "
                                f"`undercloud image build {DEPLOY_IMAGE}`")
        return found[-1]

    # ---- interface -------------------------------------------------------------------
    def available(self) -> str | None:
        if self.env.nodes is None:
            return "no nodes service in this undercloud"
        if not shutil.which("xorriso"):
            return "xorriso is not installed (apt-get install xorriso)"
        return None

    def network(self) -> network.ProvisioningNetwork:
        """Where the nodes boot and reach this undercloud (the lab's is made when missing)."""
        if self.configured is not None:
            return self.configured
        return network.lab(self.env.home, lab_network(self.env.home))

    def _serve_api(self, net: network.ProvisioningNetwork) -> str:
        """The API on the provisioning network; returns its URL there."""
        if net.netns:
            self.env.listen(GUEST_RELAY)  # what the relay leads to: guests' routes only
            serve_api(net.netns, net.address, self.env.api_port)
        else:
            self.env.listen(net.address)
        return self.env.agent_url(net.address)

    def _addresses(self, net: network.ProvisioningNetwork, inspection: bool = False) -> Addresses:
        return Addresses(self.env.home, net.address, self.env.addresses,
                         net if net is self.configured else None, inspection)

    def network_info(self) -> dict:
        return self.network().info()

    def agent_url(self, spec: Spec) -> str:
        net = self._driver_network(spec.node["uuid"]) if spec.node else None
        if net:  # a node elsewhere (a cloud's server): its ramdisk and agent call this host's address there
            self.env.listen(net["undercloud"])
            return self.env.agent_url(net["undercloud"])
        return self._serve_api(self.network())

    def startup(self) -> None:
        self._serve_api(self.network())
        self.netboot.resume()
        for rec in self.root.glob("*/deploy.json") if self.root.is_dir() else ():
            listen = self._record(rec.parent.name).get("listen")
            if listen:  # deployed nodes elsewhere keep calling there
                self.env.listen(listen)

    def _driver_network(self, node_id: str) -> dict | None:
        """The node's network facts from its driver (drivers.Driver.network), None for the lab."""
        record = self.env.nodes.record(node_id)
        driver = self.env.nodes.driver(record)
        try:
            return driver.management.network()
        except DriverError as exc:
            raise RealiserError(drivers.scrub(str(exc), record.driver_info)) from None

    def _boot_interface(self, node_id: str) -> RamdiskBoot:
        """How this node's ramdisk boots (its driver decides, Driver.boot_interface)."""
        record = self.env.nodes.record(node_id)
        try:
            return self.boots[self.env.nodes.driver(record).boot_interface]
        except DriverError as exc:
            raise RealiserError(f"node {record.label}: {exc}") from None

    def _boot_of(self, rec: dict) -> RamdiskBoot:
        """The boot interface a deploy or inspection record was prepared for."""
        return self.boots[rec.get("boot") or BootInterface.VIRTUAL_MEDIA]

    def create(self, spec: Spec) -> None:
        node = spec.node
        if not node:
            raise RealiserError("no node was claimed for this server")
        node_id, label = node["uuid"], node.get("name") or node["uuid"]
        spec.state.update(node_id=node_id, instance_name=label)
        current = self._node(spec) or node
        if current["provision_state"] != states.AVAILABLE:
            return  # a repeated call: the deploy is under way (or failed: status says so)
        if spec.image.get("disk_format") not in self.disk_formats:
            raise RealiserError(f"image {spec.image.get('name')} is {spec.image.get('disk_format')}; "
                                f"bare-metal servers take {' or '.join(self.disk_formats)}")
        if spec.image_path is None or not Path(spec.image_path).exists():
            raise RealiserError(f"the content of image {spec.image.get('name')} is missing from the image store")
        node = current  # fresh from the nodes service (a claim's view carries no ports)
        macs = node.get("ports") or []
        if not macs:
            raise RealiserError(f"node {label} has no port (MAC address): the ramdisk could not find its NIC")
        deploy_image = self._deploy_image()
        base_iso = self.env.images.ensure_blob(deploy_image)
        net = self._driver_network(node_id)
        boot = self._boot_interface(node_id)
        if net:  # the node's own network (a cloud's port): its address, no lab address
            gateway, address, prefix, mac, router = None, net["address"], net["prefix"], net["mac"], None
        else:
            prov = self.network()
            gateway = prov.address  # where its address was taken (the record's name for it)
            address = self._addresses(prov).take(spec.id, fixed_ip(spec))
            prefix, mac, router = prov.prefix, macs[0], prov.gateway
        token = secrets.token_urlsafe(32)
        d = self._dir(spec.id)
        d.mkdir(parents=True, exist_ok=True)
        url = spec.first_boot.get("url") or self.agent_url(spec)
        self._save_record(spec.id, {"node_id": node_id, "token_sha256": _sha(token), "address": address,
                                    "gateway": gateway, "created_at": time.time(), "boot": boot.name, "mac": mac,
                                    **({"listen": net["undercloud"]} if net else {})})
        request = {
            "url": url, "ca": spec.first_boot.get("ca") or self.env.ca(), "server_id": spec.id, "token": token,
            "node": label,
            "image": {k: spec.image.get(k) for k in ("id", "name", "checksum", "size", "disk_format")},
            "root_device": (node.get("properties") or {}).get("root_device") or {},
            "network": {"mac": mac, "address": address, "prefix": prefix},
        }
        # a temporary name: removed below, or at the next start after a kill (it holds the agent token)
        config_drive = vm_configdrive.make(spec, mac, address, temp_name(d / "configdrive.iso"), prefix, router)
        try:
            boot.prepare(ident=spec.id, node=label, mac=mac, address=address, prefix=prefix, base_iso=base_iso,
                         iso_sha256=deploy_image["checksum"], request=request, config_drive=config_drive,
                         iso=d / "deploy.iso")
        except UndercloudError as exc:
            raise RealiserError(f"node {label}: preparing its {boot.name} boot: {exc}") from None
        finally:
            config_drive.unlink()
        spec.state.update(address=address, mac=mac, gateway=gateway)
        try:
            self.env.nodes.act(node_id, "deploy")
        except UndercloudError as exc:
            self.netboot.disarm([mac])
            raise RealiserError(f"node {label}: {exc}") from None

    def status(self, spec: Spec) -> Status:
        node = self._node(spec)
        addresses = {LAB_NETWORK: [spec.state["address"]]} if spec.state.get("address") else {}
        if spec.state.get("deleting"):
            if node is None or (node["instance_uuid"] != spec.id and node["provision_state"] not in states.BUSY):
                return Status(DELETED)
            if node["provision_state"] in states.FAILED:
                return Status(ERROR, reason=f"undeploying node {node['name'] or node['uuid']}: {node['last_error']}")
            return Status(BUILD, reason=f"node {node['name'] or node['uuid']} is {node['provision_state']}")
        if node is None:
            return Status(DELETED, reason="its node is gone")
        label, ps = node["name"] or node["uuid"], node["provision_state"]
        if node["instance_uuid"] != spec.id:
            return Status(ERROR, reason=f"node {label} no longer serves this server")
        if ps == states.ACTIVE:
            if spec.state.get("power") == "off" and node["power_state"] == "off":
                return Status(SHUTOFF, addresses)
            return Status(ACTIVE, addresses)
        if ps == states.DEPLOY_WAIT:
            waited = time.time() - (node.get("provision_updated_at") or time.time())
            refused = self._record(spec.id).get("refused")
            if refused:  # a second boot request came before the node was waiting (boot_request)
                self._fail_wait(node["uuid"], refused)
                node = self.env.nodes.get(node["uuid"])
                ps = node["provision_state"]
            elif waited > CALLBACK_TIMEOUT:
                self._fail_wait(node["uuid"], f"timed out after {CALLBACK_TIMEOUT:.0f} s in '{ps}': the deploy "
                                              f"ramdisk on node {label} never called back")
                node = self.env.nodes.get(node["uuid"])
                ps = node["provision_state"]
            else:
                return Status(BUILD, addresses, reason=f"node {label}: {ps} ({waited:.0f} s)")
        if ps in states.FAILED:
            return Status(ERROR, addresses, reason=f"node {label}: {ps}: {node['last_error']}")
        return Status(BUILD, addresses, reason=f"node {label}: {ps}")

    def power(self, spec: Spec, on: bool) -> None:
        node = self._node(spec)
        if node is None or node["instance_uuid"] != spec.id:
            raise RealiserError("its node no longer serves this server")
        try:
            self.env.nodes.set_power(node["uuid"], "on" if on else "off")
        except UndercloudError as exc:
            raise RealiserError(f"node {node['name'] or node['uuid']}: {exc}") from None
        spec.state["power"] = "on" if on else "off"

    def _fail_wait(self, node_id: str, reason: str) -> None:
        try:
            self.env.nodes.callback(node_id, ok=False, error=reason)
        except Conflict:
            pass  # it moved meanwhile (the call-back came after all)

    def delete(self, spec: Spec) -> None:
        node = self._node(spec)
        spec.state["deleting"] = True
        if node is not None and node["instance_uuid"] == spec.id:
            node_id = node["uuid"]
            deadline = time.monotonic() + BUSY_WAIT
            while node["provision_state"] in states.BUSY and node["provision_state"] != states.DELETING:
                if time.monotonic() > deadline:
                    raise RealiserError(f"node {node['name'] or node_id} stayed {node['provision_state']} "
                                        f"for {BUSY_WAIT:.0f} s")
                time.sleep(1)
                node = self.env.nodes.get(node_id)
            if node["provision_state"] in states.WAIT:
                self.env.nodes.act(node_id, "abort")
                node = self.env.nodes.get(node_id)
            if "undeploy" in node["allowed_verbs"]:
                self.env.nodes.act(node_id, "undeploy")
            elif node["provision_state"] == states.AVAILABLE and self.env.scheduler is not None:
                self.env.scheduler.release(spec.id)  # claimed, never deployed
        shutil.rmtree(self._dir(spec.id), ignore_errors=True)
        rec_gateway = spec.state.get("gateway")
        if rec_gateway:
            Addresses(self.env.home, rec_gateway, self.env.addresses).release(spec.id)

    def console(self, spec: Spec, lines: int = 100) -> str:
        node = self._node(spec)
        label = (node or {}).get("name") or spec.state.get("node_id") or "?"
        return (f"(node {label}: a bare-metal server's serial console is on its BMC; "
                f"`undercloud node show {label}` has its deploy state and last error)")

    # ---- the nodes' deploy interface (nodes.DeployInterface: the node service asks it, on
    # its node workers, for the deploy, tear-down and inspection of every node) ----------
    def deploy(self, node, driver) -> str:
        ident = node.instance_uuid or "-"
        boot = self._boot_of(self._record(ident))
        _set_boot_mode(driver, node)
        boot.boot(driver, ident, node.macs, self._dir(ident) / "deploy.iso")
        log.info("node %s: deploy ramdisk booting from %s", node.label, boot.words)
        return WAIT

    deploy_name = "ramdisk"  # the deploy ramdisk writes the image (Ironic's "direct")

    def inspect_name(self, driver: type[Driver], info: dict, macs: list[str]) -> str:
        """By the ramdisk, unless the BMC's inventory is exact (a cloud's flavor), there is no
        image store, or the node boots from the network and has no MAC to be known by."""
        try:
            boot = self.boots[driver.boot_interface_of(info)]
        except DriverError:
            return INSPECT_BY_BMC
        if driver.inventory_is_exact or self.env.images is None or (boot.needs_mac and not macs):
            return INSPECT_BY_BMC
        return INSPECT_BY_RAMDISK

    def inspect_hardware(self, node, driver) -> str | None:
        """Boot the deploy ramdisk in inspection mode (it calls back with the inventory);
        None where it cannot (no ramdisk image, no lab network, a network boot without a MAC):
        the BMC's inventory is asked next."""
        if self.inspect_name(type(driver), driver.info, node.macs) != INSPECT_BY_RAMDISK:
            return None
        boot = self.boots[driver.boot_interface]
        try:
            deploy_image = self._deploy_image()
            base_iso = self.env.images.ensure_blob(deploy_image)
            prov = self.network()
        except RealiserError:
            return None
        gateway = prov.address
        self._serve_api(prov)
        ident = f"inspect-{node.id}"
        address = self._addresses(prov, inspection=True).take(ident)  # from inspection_iprange, if set
        token = secrets.token_urlsafe(32)
        d = self._dir(ident)
        d.mkdir(parents=True, exist_ok=True)
        mac = node.macs[0] if node.macs else None
        self._save_record(ident, {"node_id": node.id, "token_sha256": _sha(token), "mode": "inspect",
                                  "gateway": gateway, "created_at": time.time(), "boot": boot.name, "mac": mac})
        request = {"mode": "inspect", "url": self.env.agent_url(gateway), "ca": self.env.ca(), "server_id": ident,
                   "token": token, "node": node.label,
                   "network": {"mac": mac, "address": address, "prefix": prov.prefix}}
        boot.prepare(ident=ident, node=node.label, mac=mac, address=address, prefix=prov.prefix, base_iso=base_iso,
                     iso_sha256=deploy_image["checksum"], request=request, config_drive=None, iso=d / "deploy.iso")
        _set_boot_mode(driver, node)
        boot.boot(driver, ident, node.macs, d / "deploy.iso")
        log.info("node %s: inspection ramdisk booting from %s", node.label, boot.words)
        return WAIT

    def tear_down(self, node, driver) -> None:
        self.netboot.disarm(node.macs)
        eject_quietly(driver)
        driver.power.set("off")
        _drop_lab_media_copy(self.env.home, node)

    # ---- the network-booted ramdisk's request (api/ramdisk_callback.py) --------------------------
    def boot_request(self, mac: str, secret: str, client: str) -> bytes | None:
        """The request of an armed MAC, handed out once (NetBoot.request). A second request
        is refused and fails the deploy (or inspection) at once, naming it: the credentials
        may be in a stranger's hands, or the ramdisk lost them mid-flight (Ironic, too, fails
        a deploy whose agent token was already taken)."""
        try:
            return self.netboot.request(mac, secret, client)
        except BootRefused as exc:
            if exc.second:
                self._refuse_deploy(exc.entry["ident"], exc.message)
            else:
                log.warning("%s", exc.message)
            raise

    def _refuse_deploy(self, ident: str, reason: str) -> None:
        rec = self._record(ident)
        if not rec or rec.get("refused"):
            return  # failed once already
        rec["refused"] = reason  # no call-back is taken from now on, whoever holds the token
        self._save_record(ident, rec)
        log.error("%s", reason)
        if rec.get("mode") == "inspect":
            finish, args = self._finish_inspect, (rec, ident, False, reason, None)
        else:
            finish, args = self._finish, (rec["node_id"], ident, False, None, reason)
        threading.Thread(target=finish, args=args, name=f"boot-refused-{ident[:8]}", daemon=True).start()

    # ---- the ramdisk's call-back (api/ramdisk_callback.py) ---------------------------------------
    def callback(self, server_id: str, token: str | None, ok: bool, error: str | None,
                 inventory: dict | None = None) -> dict:
        """`server_id`: the server deployed, or `inspect-<node id>` for an inspection."""
        rec = self._record(server_id)
        if not rec or not token or not hmac.compare_digest(rec.get("token_sha256", ""), _sha(token)):
            raise DeployDenied("unknown server or wrong deploy token")
        if rec.get("refused"):
            raise Conflict(f"this deploy was failed: {rec['refused']}")
        node = self.env.nodes.get(rec["node_id"])
        if rec.get("mode") == "inspect":
            if node["provision_state"] != states.INSPECT_WAIT:
                raise Conflict(f"node {node['name'] or node['uuid']} is not waiting for an inspection "
                               f"(state '{node['provision_state']}')")
            error = (error or "failed, without a reason").strip().splitlines()[0][:500] if not ok else None
            threading.Thread(target=self._finish_inspect, args=(rec, server_id, ok, error, inventory),
                             name=f"inspect-finish-{rec['node_id'][:8]}", daemon=True).start()
            return {"acknowledged": True, "node": node["name"] or node["uuid"]}
        if node["provision_state"] != states.DEPLOY_WAIT or node["instance_uuid"] != server_id:
            raise Conflict(f"node {node['name'] or node['uuid']} is not waiting for this call-back "
                           f"(state '{node['provision_state']}')")
        error = (error or "failed, without a reason").strip().splitlines()[0][:500] if not ok else None
        threading.Thread(target=self._finish, args=(rec["node_id"], server_id, ok, error),
                         name=f"deploy-finish-{server_id[:8]}", daemon=True).start()
        return {"acknowledged": True, "node": node["name"] or node["uuid"]}

    def _finish(self, node_id: str, server_id: str, ok: bool, error: str | None, reason: str | None = None) -> None:
        """Eject, boot from disk, reboot (or power off a failed node); then the node's event.
        A failure's reason is the ramdisk's `error`, or `reason` (the undercloud's own)."""
        record = self.env.nodes.record(node_id)
        driver = self.env.nodes.driver(record)
        try:
            self._boot_of(self._record(server_id)).clean_up(driver, record.macs)
            if ok:
                driver.management.set_boot_device("disk", persistent=True)
                driver.power.set("reboot")
            else:
                driver.power.set("off")
            self.env.nodes.record_power(node_id, driver)
        except DriverError as exc:
            drivers_reason = drivers.scrub(str(exc), record.driver_info)
            self._fail_wait(node_id, f"finishing the deploy: {drivers_reason}" + (f" (ramdisk: {error})" if error else "")
                            + (f" ({reason})" if reason else ""))
            return
        _drop_lab_media_copy(self.env.home, record)
        for p in ("deploy.iso",):
            (self._dir(server_id) / p).unlink(missing_ok=True)
        if ok:
            try:
                self.env.nodes.callback(node_id, ok=True)
            except Conflict as exc:
                log.warning("node %s: deploy finished but %s", record.label, exc)
        else:
            self._fail_wait(node_id, reason or f"deploy ramdisk: {error}")


    def _finish_inspect(self, rec: dict, ident: str, ok: bool, error: str | None, inventory: dict | None) -> None:
        node_id = rec["node_id"]
        record = self.env.nodes.record(node_id)
        driver = self.env.nodes.driver(record)
        try:
            self._boot_of(rec).clean_up(driver, record.macs)
            driver.power.set("off")
            self.env.nodes.record_power(node_id, driver)
        except DriverError as exc:
            ok, error = False, f"finishing the inspection: {drivers.scrub(str(exc), record.driver_info)}"
        _drop_lab_media_copy(self.env.home, record)
        Addresses(self.env.home, rec["gateway"], self.env.addresses).release(ident)
        shutil.rmtree(self._dir(ident), ignore_errors=True)
        inv = {k: v for k, v in (inventory or {}).items() if k in ("cpus", "memory_mb", "local_gb", "cpu_arch", "macs")}
        try:
            self.env.nodes.callback(node_id, ok=ok and bool(inv), inventory=inv if ok else None,
                                    error=None if ok and inv else (error or "the ramdisk reported no inventory"))
        except Conflict as exc:
            log.warning("node %s: inspection finished but %s", record.label, exc)


def _set_boot_mode(driver, node) -> None:
    """The node's `boot_mode` capability (Ironic's), set on the BMC where it reports another
    mode. The images boot either way (images/disk.py); nodes without the capability, and BMCs
    that cannot tell (IPMI), are left as they are."""
    wanted = ((node.properties or {}).get("capabilities") or {}).get("boot_mode")
    if wanted and driver.management.boot_mode() not in (None, wanted):
        driver.management.set_boot_mode(wanted)
        log.info("node %s: boot mode set to %s", node.label, wanted)


def _drop_lab_media_copy(home, node) -> None:
    """In the virtual lab the Redfish emulator keeps a copy of inserted media in the lab's
    storage pool (named after the media file and the domain's UUID): remove it."""
    from undercloud.host.libvirt import media_pool, virsh

    system = str((node.driver_info or {}).get("system_id") or "").rstrip("/").rsplit("/", 1)[-1]
    if not system:
        return
    pool, _path = media_pool(home.instance)
    volume = f"{baremetal_media.MEDIA_NAME.replace('.', '-')}-{system}.img"
    try:
        virsh("vol-delete", "--pool", pool, volume, check=False, timeout=30)
    except UndercloudError:
        pass
