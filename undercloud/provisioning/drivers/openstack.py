"""`openstack`: a Nova server of a cloud the undercloud knows, as a node (QuintupleO's virtual
power driver): its power and power state are Nova's, its inventory its flavor's.

driver_info: `cloud` (a cloud of `undercloud cloud add`), `server` (the server's id or
name there). instackenv.json: `"pm_type": "openstack", "cloud": "host", "server": "bm-0"`.
The cloud's entry comes from whoever makes the driver (`cloud_config`: the node service's,
provisioning.clouds.Clouds.config where the API service runs it).
Power on/off/reboot are Nova's start, stop and hard reboot, each waited for; a server in
another state (BUILD, ERROR...) is an error naming it.

Virtual media is Nova rescue (stable device rescue, API 2.87): `media.insert` uploads the
ISO to the cloud's Glance as a rescue image (`hw_rescue_device=cdrom`, so the server keeps
its own disk where it was and boots the CD); a one-time boot from `cd` then powers on as
`rescue` with it (status RESCUE: on). `media.eject` deletes the image (a rescued server
keeps running, as a machine whose media is ejected); the next power off or reboot ends
the rescue, so the server boots its disk. Drivers live for one operation: the inserted
image and the pending boot device are kept in the server's metadata.

The deploy ramdisk on such a node takes the address of the server's Neutron port and
calls the undercloud at this host's address on its route to that port (`management.network()`).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import tempfile
import threading
import urllib.request
from pathlib import Path

from undercloud.errors import UndercloudError
from undercloud.host.run import route_source
from undercloud.provisioning.drivers import (
    BootInterface,
    Driver,
    DriverError,
    ManagementInterface,
    MediaInterface,
    PowerInterface,
)

POWER_WAIT = 300  # seconds for Nova to reach the state asked for (a stop waits out the guest's ACPI grace)
_connections: dict[tuple[str, str], object] = {}
MEDIA_KEY = "undercloud_media"  # server metadata: the Glance id of the inserted rescue image
BOOT_KEY = "undercloud_boot"    # server metadata: "cd" while a one-time boot from it is pending
_lock = threading.Lock()


class OpenStackPower(PowerInterface):
    """Power as the server's status: start, stop, reboot; a boot from cd is Nova rescue."""

    name = "nova"

    def get(self) -> str:
        d = self.driver
        _conn, srv = d.server()
        if srv.status in ("ACTIVE", "REBOOT", "HARD_REBOOT", "RESCUE"):  # rebooting: on, as a BMC says
            return "on"
        if srv.status == "SHUTOFF":
            return "off"
        raise DriverError(f"{d.where} is {srv.status}" + (f" ({srv.task_state})" if srv.task_state else ""))

    def set(self, action: str) -> None:
        d = self.driver
        conn, srv = d.server()
        meta = srv.metadata or {}
        if srv.status == "RESCUE" and action in ("off", "reboot"):  # leaving the CD boots the disk
            d.call("unrescue", conn.compute.unrescue_server, srv)
            srv = d.wait(conn, srv, "ACTIVE")
            d.rescue_image(conn, srv)  # an ejected image's key can go now
            if action == "reboot" and meta.get(BOOT_KEY) != "cd":
                return
        if action in ("on", "reboot") and meta.get(BOOT_KEY) == "cd" and srv.status != "RESCUE":
            media = d.rescue_image(conn, srv)
            if media is None:
                raise DriverError(f"{d.where}: boot from cd asked, but no media is inserted")
            # once; and before the rescue: Nova takes no metadata from a rescued server
            d.call("metadata", conn.compute.delete_server_metadata, srv, [BOOT_KEY])
            d.call("rescue", conn.compute.rescue_server, srv, image=media.id)
            d.wait(conn, srv, "RESCUE")
            return
        if action == "reboot" and srv.status == "ACTIVE":
            d.call("reboot", conn.compute.reboot_server, srv, "HARD")
            # read it again: the copy in hand still says ACTIVE, which the wait would take as done
            srv = d.call("reboot", conn.compute.get_server, srv.id)
        elif action in ("on", "reboot") and srv.status not in ("ACTIVE", "RESCUE"):
            d.call("start", conn.compute.start_server, srv)
        elif action == "off" and srv.status != "SHUTOFF":
            d.call("stop", conn.compute.stop_server, srv)
        if not (action == "on" and srv.status == "RESCUE"):
            d.wait(conn, srv, "SHUTOFF" if action == "off" else "ACTIVE")


class OpenStackManagement(ManagementInterface):
    """The boot device as the server's metadata (cd: rescue at the next power on), the
    flavor's sizes and the ports' MACs as the inventory, the first port as the network."""

    name = "nova"

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        d = self.driver
        if device == "pxe":
            raise DriverError(f"{d.where}: a Nova server has no network boot here (boot devices: disk, cd)")
        conn, srv = d.server()
        if device == "cd":
            if persistent:
                raise DriverError(f"{d.where}: boots from cd once only (Nova rescue)")
            d.call("metadata", conn.compute.set_server_metadata, srv, **{BOOT_KEY: "cd"})
        elif (srv.metadata or {}).get(BOOT_KEY):
            d.call("metadata", conn.compute.delete_server_metadata, srv, [BOOT_KEY])

    def network(self) -> dict:
        """The server's first port's address and prefix, and this host's address towards it."""
        d = self.driver
        conn, srv = d.server()
        ports = sorted(d.call("ports", conn.network.ports, device_id=srv.id), key=lambda p: p.mac_address)
        for port in ports:
            for fixed in port.fixed_ips or []:
                address = ipaddress.ip_address(fixed["ip_address"])
                if address.version != 4:
                    continue
                subnet = d.call("subnet", conn.network.get_subnet, fixed["subnet_id"])
                try:
                    undercloud = route_source(str(address))
                except UndercloudError as exc:
                    raise DriverError(f"{d.where}: {exc.message}") from None
                return {"mac": port.mac_address, "address": str(address),
                        "prefix": ipaddress.ip_network(subnet.cidr).prefixlen, "undercloud": undercloud}
        raise DriverError(f"{d.where}: the server has no IPv4 address on any port")

    def inventory(self) -> dict | None:
        d = self.driver
        conn, srv = d.server()
        flavor = srv.flavor or {}
        if not flavor.get("ram"):  # older microversions name the flavor only
            f = d.call("flavor", conn.compute.get_flavor, flavor.get("id"))
            flavor = {"vcpus": f.vcpus, "ram": f.ram, "disk": f.disk}
        ports = d.call("ports", conn.network.ports, device_id=srv.id)
        return {"cpus": flavor.get("vcpus"), "memory_mb": flavor.get("ram"), "local_gb": flavor.get("disk"),
                "cpu_arch": "x86_64", "macs": sorted(p.mac_address for p in ports)}


class OpenStackMedia(MediaInterface):
    """An ISO as the server's rescue image in the cloud's Glance."""

    name = "nova-rescue"

    def insert(self, url: str) -> None:
        """Upload the ISO at `url` (served on this host) to Glance as this server's rescue image."""
        d = self.driver
        self.eject()
        conn, srv = d.server()
        tmp = Path(tempfile.mkdtemp(prefix="uc-rescue-"))
        try:
            iso = tmp / "media.iso"
            try:
                with urllib.request.urlopen(url, timeout=60) as resp, open(iso, "wb") as f:
                    shutil.copyfileobj(resp, f, 1 << 20)
            except OSError as exc:
                # not the URL: its path is the one-time secret the media is served under
                raise DriverError(f"{d.where}: cannot read the media to upload: {exc}") from None
            # private (the ISO holds this deploy's tokens), deleted again at eject
            img = d.call("upload of the rescue image", conn.create_image, f"undercloud-media-{srv.id}",
                         filename=str(iso), disk_format="iso", container_format="bare", wait=True,
                         timeout=POWER_WAIT, visibility="private", hw_rescue_device="cdrom",
                         hw_rescue_bus="ide")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        d.call("metadata", conn.compute.set_server_metadata, srv, **{MEDIA_KEY: img.id})

    def eject(self) -> None:
        """Delete the rescue image. A rescued server keeps its key (Nova takes no metadata
        from it): a key whose image is gone is no media, and is dropped at the next look."""
        d = self.driver
        conn, srv = d.server()
        media = d.rescue_image(conn, srv)
        if media is not None:
            d.call("delete the rescue image", conn.image.delete_image, media)
            if srv.status != "RESCUE":
                d.call("metadata", conn.compute.delete_server_metadata, srv, [MEDIA_KEY])


class OpenStackDriver(Driver):
    name = "openstack"
    power_interface, management_interface, media_interface = OpenStackPower, OpenStackManagement, OpenStackMedia
    inventory_is_exact = True  # the flavor's sizes and the ports' MACs
    boot_interfaces = (BootInterface.VIRTUAL_MEDIA,)  # Nova rescue with the ISO; a cloud's network boots nothing

    @property
    def where(self) -> str:
        return f"cloud {self.info.get('cloud')} server {self.info.get('server')}"

    def call(self, what: str, fn, *args, **kwargs):
        """`fn(...)` against the cloud, its failures as DriverError naming the server."""
        from undercloud.provisioning.clouds import call

        return call(DriverError, self.where, what, fn, *args, **kwargs)

    def _conn(self):
        """One connection per cloud entry for the process (drivers are made per operation)."""
        from undercloud.provisioning.clouds import connect

        if self.cloud_config is None:  # given by the node service (NodeService.driver)
            raise DriverError(f"{self.where}: this process knows no clouds")
        try:
            config = self.cloud_config(self.info["cloud"])
            key = (self.info["cloud"], json.dumps(config, sort_keys=True))
            with _lock:
                if key not in _connections:
                    _connections[key] = connect(self.info["cloud"], config)
                return _connections[key]
        except UndercloudError as exc:
            raise DriverError(exc.message) from None

    def server(self, conn=None):
        """(connection, the server), or DriverError where the cloud has no such server."""
        conn = conn or self._conn()
        srv = self.call("find", conn.compute.find_server, self.info["server"], ignore_missing=True)
        if srv is None:
            raise DriverError(f"{self.where}: no such server in the cloud")
        return conn, srv

    def wait(self, conn, srv, status: str):
        return self.call(f"wait for {status}", conn.compute.wait_for_server, srv, status=status, wait=POWER_WAIT)

    def rescue_image(self, conn, srv):
        """The inserted rescue image, or None (its stale key removed where Nova allows)."""
        ref = (srv.metadata or {}).get(MEDIA_KEY)
        if not ref:
            return None
        img = self.call("find the rescue image", conn.image.find_image, ref, ignore_missing=True)
        if img is None and srv.status != "RESCUE":
            self.call("metadata", conn.compute.delete_server_metadata, srv, [MEDIA_KEY])
        return img


DRIVER = OpenStackDriver


def from_instackenv(entry: dict) -> dict:
    return {"cloud": str(entry["cloud"]), "server": str(entry["server"])}


def bmc_key(info: dict) -> str:
    return f"openstack|{info.get('cloud')}|{info.get('server')}"


def required() -> tuple[str, ...]:
    return ("cloud", "server")
