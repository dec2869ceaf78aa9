"""Drivers: one small plugin per BMC protocol, made of interfaces as Ironic's hardware types:
power (read, set), management (boot device and mode, the BMC's inventory and network), media
(virtual media) and the boot interfaces it offers the deploy ramdisk.

A driver module holds a `Driver` subclass (its BMC session and wording) naming its interface
classes, and a `from_instackenv` that turns an instackenv.json entry's `pm_*` fields into the
driver_info it needs. Adding a protocol is adding a module here and a line in DRIVERS.

What a driver needs from the service beyond its node's driver_info comes in at construction
(`get(..., cloud_config=...)`; the node service passes its own, `NodeService.driver`): today
that is `cloud_config`, a cloud's entry by name, for the nodes that are a cloud's servers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from undercloud.errors import InvalidInput, UndercloudError
from undercloud.masking import mask_keys, mask_text

# name -> module; instackenv `pm_type` aliases map onto these names.
DRIVERS = {
    "redfish": "undercloud.provisioning.drivers.redfish",
    "ipmi": "undercloud.provisioning.drivers.ipmi",
    "fake": "undercloud.provisioning.drivers.fake",
    "openstack": "undercloud.provisioning.drivers.openstack",
}
ALIASES = {"pxe_ipmitool": "ipmi", "ipmitool": "ipmi", "fake-hardware": "fake", "idrac-redfish": "redfish"}

POWER_STATES = ("on", "off")
POWER_ACTIONS = ("on", "off", "reboot")
BOOT_DEVICES = ("pxe", "disk", "cd")
BOOT_MODES = ("bios", "uefi")  # a node's `boot_mode` capability (Ironic's values)

# A cloud's entry (provisioning.clouds.Clouds.config) by its name.
CloudConfig = Callable[[str], dict]


class BootInterface:
    """How the deploy ramdisk boots on a node (Ironic's boot interfaces): named here only.
    Not to be confused with the boot *devices* (BOOT_DEVICES), where "pxe" is a device."""

    VIRTUAL_MEDIA = "virtual-media"  # the BMC inserts the ramdisk ISO, the node boots it once from CD
    PXE = "pxe"                      # network boot (servers/baremetal_netboot.py arms it)


class DriverError(UndercloudError):
    """The BMC refused or failed an operation; the message names the BMC, never secrets."""


class BMCUnreachable(DriverError):
    """The BMC did not answer at all."""


class BMCAuthFailed(DriverError):
    """The BMC refused the credentials."""


class Interface:
    """One of a driver's interfaces (as Ironic composes a hardware type of power, management,
    boot ... interfaces). Made with its driver, whose BMC session, driver_info and wording
    (`where`, `_call`) it uses; `name` is what `node show` says is in effect."""

    name = "none"

    def __init__(self, driver: Driver):
        self.driver = driver


class PowerInterface(Interface):
    """The node's power, read and set."""

    def get(self) -> str:
        """`on` or `off`."""
        raise NotImplementedError

    def set(self, action: str) -> None:
        """`on`, `off` (hard) or `reboot` (on when off)."""
        raise NotImplementedError


class ManagementInterface(Interface):
    """What the BMC manages besides power: the boot device and mode, and what it knows of the
    hardware and of the node's network."""

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        raise NotImplementedError

    def boot_mode(self) -> str | None:
        """The firmware's boot mode ("bios" or "uefi") as the BMC reports it; None: it cannot tell."""
        return None

    def set_boot_mode(self, mode: str) -> None:
        """Switch the firmware to `mode` (one of BOOT_MODES) for the boots that follow."""
        raise DriverError(f"{self.driver.where} cannot set the boot mode")

    def inventory(self) -> dict | None:
        """What the BMC knows of the hardware (cpus, memory_mb, cpu_arch, local_gb, macs),
        or None when this protocol cannot tell."""
        return None

    def network(self) -> dict | None:
        """Where a ramdisk on this node is and reaches the undercloud: `mac`, `address`,
        `prefix` and `undercloud` (this host's address there); None: on the lab network."""
        return None


class MediaInterface(Interface):
    """Virtual media: an image the node can boot from as from a CD. This one has none."""

    def insert(self, url: str) -> None:
        raise DriverError(f"{self.driver.name} does not support virtual media")

    def eject(self) -> None:
        raise DriverError(f"{self.driver.name} does not support virtual media")


class Driver:
    """One node's BMC (Ironic's hardware type): its session, and the interfaces it is made of
    (`power`, `management`, `media`, each an instance of the class named below). Instances
    are short-lived: made for an operation, then dropped.

    `sessions` is where a driver keeps its BMC session (a logged-in client), keyed by the
    module's `endpoint(info)`: a driver alone gets its own, so one operation logs in once; the
    drivers of one batch of node work share one (`Sessions`), so nodes behind the same BMC
    (a Redfish BMC serving several systems) log in once for the batch.
    """

    name = "base"
    power_interface: type[PowerInterface] = PowerInterface
    management_interface: type[ManagementInterface] = ManagementInterface
    media_interface: type[MediaInterface] = MediaInterface
    # True where inventory() is the whole truth (a cloud's flavor): inspection then boots no ramdisk
    inventory_is_exact = False
    # How the deploy ramdisk can be booted through this BMC (BootInterface), the default first.
    boot_interfaces: tuple[str, ...] = (BootInterface.PXE,)

    def __init__(self, info: dict[str, Any], sessions: Sessions | None = None,
                 cloud_config: CloudConfig | None = None):
        self.info = info
        self.sessions = sessions if sessions is not None else Sessions()
        # a cloud's entry by name (drivers whose nodes are a cloud's servers); None: no clouds known
        self.cloud_config = cloud_config
        self.power = self.power_interface(self)
        self.management = self.management_interface(self)
        self.media = self.media_interface(self)

    @property
    def where(self) -> str:
        return f"{self.name} BMC {self.info.get('address')}"

    @property
    def boot_interface(self) -> str:
        """The node's own choice (`boot_interface` of its driver_info) or the default."""
        return self.boot_interface_of(self.info)

    @classmethod
    def boot_interface_of(cls, info: dict[str, Any]) -> str:
        """The boot interface a node with this driver_info boots by (no driver made for it)."""
        chosen = info.get("boot_interface") or cls.boot_interfaces[0]
        if chosen not in cls.boot_interfaces:
            raise DriverError(f"boot_interface {chosen!r} is not one of {cls.name}'s ({', '.join(cls.boot_interfaces)})")
        return chosen

    def validate(self) -> None:
        """Log in to the BMC and read the system: proves address and credentials."""
        self.power.get()


class Sessions(dict):
    """BMC sessions shared by the drivers of one batch, by endpoint; `close()` ends them."""

    def close(self) -> None:
        for session in self.values():
            try:
                getattr(session, "close", lambda: None)()
            except Exception:  # noqa: BLE001 - a session that cannot close is dropped all the same
                pass
        self.clear()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def module(name: str):
    name = canonical(name)
    if name not in DRIVERS:
        raise InvalidInput(f"unknown driver {name!r} (known: {', '.join(DRIVERS)})")
    return importlib.import_module(DRIVERS[name])


def get(name: str, info: dict[str, Any], sessions: Sessions | None = None,
        cloud_config: CloudConfig | None = None) -> Driver:
    """A node's driver; `cloud_config` gives a cloud's entry by name (the node service's own:
    use `NodeService.driver` where there is one)."""
    return module(name).DRIVER(info, sessions, cloud_config=cloud_config)


def interfaces(name: str, info: dict[str, Any]) -> dict[str, str | None]:
    """The driver's interfaces in effect for a node of driver `name`, as `node show` gives
    them: power, management, media and boot (`Driver.boot_interface`, the one its deploy and
    inspection use). None where it cannot tell: an unknown driver, or driver_info naming a
    boot interface the driver lacks."""
    try:
        cls = module(name).DRIVER
    except InvalidInput:
        return dict.fromkeys(INTERFACES)
    try:
        boot = cls.boot_interface_of(info)
    except DriverError:
        boot = None
    return {"power_interface": cls.power_interface.name, "management_interface": cls.management_interface.name,
            "media_interface": cls.media_interface.name, "boot_interface": boot}


INTERFACES = ("power_interface", "management_interface", "media_interface", "boot_interface")


def endpoint(name: str, info: dict[str, Any]) -> tuple | None:
    """The BMC session a node's driver uses (address and credentials), for grouping node
    work by BMC; None where a driver shares nothing between nodes (each node on its own)."""
    fn = getattr(module(name), "endpoint", None)
    return (canonical(name), *fn(info)) if fn else None


def mask(info: dict[str, Any]) -> dict[str, Any]:
    """driver_info as it may be shown: every password-like value replaced."""
    return mask_keys(info, _secret)


def scrub(text: str, info: dict[str, Any]) -> str:
    """`text` with any secret from `info` replaced (BMC errors may echo what they got)."""
    return mask_text(text, [v for k, v in info.items() if _secret(k) and isinstance(v, str) and v])


def _secret(key: str) -> bool:
    return "password" in key or "secret" in key or "token" in key
