"""How the deploy ramdisk reaches a bare-metal node: Ironic's boot interfaces, a class each.

A node boots by the interface its driver gives (drivers.Driver.boot_interface: its
driver_info's `boot_interface`, else the driver's first); the bare-metal realiser asks
`BOOT_INTERFACES` for its class. Each prepares the ramdisk's way in for a deploy or an
inspection (`prepare`), boots the node into it (`boot`), and takes the way in away once the
ramdisk called back (`clean_up`). Virtual media is also how a cloud's server boots the ramdisk
(drivers/openstack.py: a rescue with the ISO), so that driver needs no interface of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from undercloud.errors import UndercloudError
from undercloud.images.disk import RAMDISK_ARGS
from undercloud.provisioning import drivers
from undercloud.provisioning.drivers import BootInterface, DriverError
from undercloud.provisioning.servers import baremetal_media
from undercloud.provisioning.servers.baremetal_netboot import NetBoot


class RamdiskBoot:
    name: ClassVar[str]
    words: ClassVar[str]  # how the log says where the ramdisk boots from
    needs_mac: ClassVar[bool] = False  # the node must have a port (MAC) for this way in

    def __init__(self, netboot: NetBoot):
        self.netboot = netboot

    def prepare(self, *, ident: str, node: str, mac: str | None, address: str, prefix: int, base_iso: Path,
                iso_sha256: str, request: dict, config_drive: Path | None, iso: Path) -> None:
        """Make the ramdisk's way in for `ident` (a server id, or `inspect-<node id>`), which
        carries `request` (and the config drive of a deploy)."""
        raise NotImplementedError

    def boot(self, driver, ident: str, macs: list[str], iso: Path) -> None:
        """Power the node off and boot it once into what `prepare` made."""
        raise NotImplementedError

    def clean_up(self, driver, macs: list[str]) -> None:
        """Take the way in away (the ramdisk called back, or the deploy ended)."""
        raise NotImplementedError


class VirtualMediaBoot(RamdiskBoot):
    """The deploy ISO with the request (and config drive) in it, inserted through the BMC."""

    name = BootInterface.VIRTUAL_MEDIA
    words = "virtual media"

    def prepare(self, *, ident, node, mac, address, prefix, base_iso, iso_sha256, request, config_drive, iso):
        baremetal_media.make_deploy_iso(base_iso, request, config_drive, iso)

    def boot(self, driver, ident, macs, iso):
        if not iso.exists():
            raise UndercloudError(f"no deploy media prepared for server {ident} "
                                  f"(deploy bare-metal nodes through `server create`)")
        driver.power.set("off")
        eject_quietly(driver)
        with baremetal_media.serve_file(iso) as url:  # served once, on loopback
            driver.media.insert(url)
        driver.management.set_boot_device("cd", persistent=False)
        driver.power.set("on")

    def clean_up(self, driver, macs):
        driver.media.eject()


class PxeBoot(RamdiskBoot):
    """The node's MAC armed: DHCP answers it and iPXE loads the ramdisk from the API
    (baremetal_netboot.py)."""

    name = BootInterface.PXE
    words = "the network"
    needs_mac = True  # DHCP answers the armed MAC

    def prepare(self, *, ident, node, mac, address, prefix, base_iso, iso_sha256, request, config_drive, iso):
        self.netboot.arm(mac=mac, ident=ident, node=node, address=address, prefix=prefix, base_iso=base_iso,
                         iso_sha256=iso_sha256, request=request, config_drive=config_drive,
                         kernel_args=RAMDISK_ARGS)

    def boot(self, driver, ident, macs, iso):
        if not any((self.netboot.armed(m) or {}).get("ident") == ident for m in macs):
            raise UndercloudError(f"no network boot armed for server {ident} "
                                  f"(deploy bare-metal nodes through `server create`)")
        driver.power.set("off")
        driver.management.set_boot_device("pxe", persistent=False)
        driver.power.set("on")

    def clean_up(self, driver, macs):
        self.netboot.disarm(macs)


BOOT_INTERFACES: dict[str, type[RamdiskBoot]] = {c.name: c for c in (VirtualMediaBoot, PxeBoot)}


def eject_quietly(driver) -> None:
    """Eject whatever media is in; a BMC that is not there still fails the step."""
    try:
        driver.media.eject()
    except DriverError as exc:
        if isinstance(exc, (drivers.BMCUnreachable, drivers.BMCAuthFailed)):
            raise
