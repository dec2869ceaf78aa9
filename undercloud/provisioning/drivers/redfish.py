"""`redfish`: a Redfish BMC through sushy (real BMCs, or sushy-tools in the virtual lab).

driver_info: `address` (http(s)://host[:port]), `system_id` (/redfish/v1/Systems/ID),
`username`, `password`, `verify_ca` (bool).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from undercloud.provisioning.drivers import (
    BMCAuthFailed,
    BMCUnreachable,
    BootInterface,
    Driver,
    DriverError,
    ManagementInterface,
    MediaInterface,
    PowerInterface,
)

TIMEOUT = 30  # seconds per HTTP request to the BMC


def _sushy():
    try:
        import sushy
    except ImportError:
        raise DriverError("the redfish driver needs sushy: pip install 'undercloud[lab]'") from None
    return sushy


class RedfishPower(PowerInterface):
    name = "redfish"

    def get(self) -> str:
        system = self.driver.system()
        self.driver.call("read power", lambda: system.refresh(force=True))
        state = system.power_state
        return "on" if str(state.value).lower() in ("on", "poweringoff") else "off"

    def set(self, action: str) -> None:
        sushy = _sushy()
        system = self.driver.system()
        if action == "reboot" and self.get() == "off":
            action = "on"
        reset = {"on": sushy.ResetType.ON, "off": sushy.ResetType.FORCE_OFF,
                 "reboot": sushy.ResetType.FORCE_RESTART}[action]
        try:
            self.driver.call(f"power {action}", lambda: system.reset_system(reset))
        except Exception as refused:
            # BMCs refuse to power off a machine that just went off by itself (and on one
            # already on): reaching the asked state is success, as Ironic treats it.
            try:
                reached = action != "reboot" and self.get() == action
            except Exception:
                raise refused from None
            if not reached:
                raise


class RedfishManagement(ManagementInterface):
    name = "redfish"

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        sushy = _sushy()
        source = {"pxe": sushy.BootSource.PXE, "disk": sushy.BootSource.HDD, "cd": sushy.BootSource.CD}[device]
        enabled = sushy.BootSourceOverrideEnabled.CONTINUOUS if persistent else sushy.BootSourceOverrideEnabled.ONCE
        system = self.driver.system()
        self.driver.call(f"set boot device {device}", lambda: system.set_system_boot_options(source, enabled=enabled))

    def boot_device(self) -> tuple[str, bool]:
        """(device, persistent) as the BMC reports it."""
        system = self.driver.system()
        self.driver.call("read the boot device", system.refresh)
        boot = system.boot
        target = str(getattr(boot.target, "value", boot.target)).lower()
        device = {"pxe": "pxe", "hdd": "disk", "cd": "cd"}.get(target, target)
        return device, str(getattr(boot.enabled, "value", boot.enabled)).lower() == "continuous"

    def boot_mode(self) -> str | None:
        system = self.driver.system()
        self.driver.call("read the boot mode", system.refresh)
        mode = str(getattr(system.boot.mode, "value", system.boot.mode) or "").lower()
        return {"uefi": "uefi", "legacy": "bios"}.get(mode)

    def set_boot_mode(self, mode: str) -> None:
        sushy = _sushy()
        value = {"uefi": sushy.BootSourceOverrideMode.UEFI, "bios": sushy.BootSourceOverrideMode.LEGACY}[mode]
        system = self.driver.system()
        self.driver.call(f"set boot mode {mode}", lambda: system.set_system_boot_options(mode=value))

    def inventory(self) -> dict | None:
        system = self.driver.system()

        def read() -> dict:
            out: dict[str, Any] = {}
            procs = system.processors.summary
            out["cpus"] = procs.count
            arch = str(getattr(procs.architecture, "value", procs.architecture) or "").lower()
            out["cpu_arch"] = {"x86": "x86_64", "arm": "aarch64"}.get(arch, arch or None)
            if system.memory_summary and system.memory_summary.size_gib:
                out["memory_mb"] = int(system.memory_summary.size_gib * 1024)
            out["macs"] = sorted(m.lower() for m in system.ethernet_interfaces.summary)
            disks = _disk_sizes(system)
            if disks:
                out["local_gb"] = max(disks) // (1024 ** 3)  # like Ironic: the root disk
            return out

        return self.driver.call("read the inventory", read)


class RedfishMedia(MediaInterface):
    name = "redfish"

    def _cd(self):
        sushy = _sushy()
        system = self.driver.system()

        def find():
            collections = []
            try:
                collections.append(system.virtual_media)
            except sushy.exceptions.SushyError:
                pass
            for manager in system.managers:
                collections.append(manager.virtual_media)
            for coll in collections:
                for vm in coll.get_members():
                    if any(str(getattr(t, "value", t)).upper() in ("CD", "DVD") for t in vm.media_types):
                        return vm
            raise DriverError(f"{self.driver.where} offers no CD/DVD virtual media")

        return self.driver.call("find virtual media", find)

    def insert(self, url: str) -> None:
        vm = self._cd()
        self.driver.call("insert virtual media", lambda: vm.insert_media(url, inserted=True, write_protected=True))

    def eject(self) -> None:
        vm = self._cd()
        self.driver.call("eject virtual media", vm.eject_media)

    def url(self) -> str | None:
        """The URL of the inserted CD/DVD image, or None."""
        vm = self._cd()
        self.driver.call("read virtual media", vm.refresh)
        return vm.image or None if vm.inserted else None


class RedfishDriver(Driver):
    name = "redfish"
    power_interface, management_interface, media_interface = RedfishPower, RedfishManagement, RedfishMedia
    boot_interfaces = (BootInterface.VIRTUAL_MEDIA, BootInterface.PXE)

    def __init__(self, info: dict[str, Any], sessions=None, cloud_config=None):
        super().__init__(info, sessions, cloud_config)
        self._system = None

    def call(self, what: str, fn):
        """`fn()` against this BMC, its failures as DriverError naming the BMC."""
        sushy = _sushy()
        try:
            return fn()
        except sushy.exceptions.AccessError as exc:
            if getattr(exc, "status_code", None) == 401:
                raise BMCAuthFailed(f"{self.where} refused the credentials of user "
                                  f"{self.info.get('username')!r} (HTTP 401)") from None
            raise DriverError(f"{self.where}: {what}: access denied ({exc.status_code})") from None
        except sushy.exceptions.ResourceNotFoundError:
            raise DriverError(f"{self.where} has no system {self.info.get('system_id')!r}") from None
        except sushy.exceptions.ConnectionError as exc:
            raise BMCUnreachable(f"cannot reach {self.where}: {_first_line(exc)}") from None
        except sushy.exceptions.SushyError as exc:
            raise DriverError(f"{self.where}: {what}: {_first_line(exc)}") from None

    def system(self):
        if self._system is None:
            sushy = _sushy()
            info = self.info

            def connect():
                # one root (HTTP session, keep-alive connections) per BMC and credentials, shared by
                # the systems of a batch behind it; a BMC that fails is not kept
                key = ("redfish", *endpoint(info))
                root = self.sessions.get(key)
                if root is None:
                    root = sushy.Sushy(
                        info["address"].rstrip("/") + "/redfish/v1", verify=info.get("verify_ca", True),
                        auth=sushy.auth.BasicAuth(info.get("username"), info.get("password")),
                        read_timeout=TIMEOUT, connect_timeout=10, server_side_retries=2,
                        server_side_retries_delay=0.5,
                    )
                    self.sessions[key] = _Root(root)
                else:
                    root = root.root
                return root.get_system(info.get("system_id") or None)

            self._system = self.call("read the system", connect)
        return self._system

    def validate(self) -> None:
        self.system()


class _Root:
    """A sushy root as a batch's session: `close()` closes its HTTP connections."""

    def __init__(self, root):
        self.root = root

    def close(self) -> None:
        self.root._conn.close()


def _disk_sizes(system) -> list[int]:
    for attr in ("simple_storage", "storage"):
        try:
            coll = getattr(system, attr)
            sizes = coll.disks_sizes_bytes if attr == "simple_storage" else coll.drives_sizes_bytes
            if sizes:
                return list(sizes)
        except Exception:  # noqa: BLE001 - many BMCs (sushy-tools' libvirt driver) lack one or both
            continue
    return []


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


DRIVER = RedfishDriver


def from_instackenv(entry: dict) -> dict:
    addr = str(entry["pm_addr"])
    if "://" not in addr:
        addr = "https://" + addr
    parts = urlsplit(addr)
    if entry.get("pm_port") and not parts.port:
        addr = f"{parts.scheme}://{parts.hostname}:{entry['pm_port']}{parts.path}"
    system = entry.get("pm_system_id")
    if system and not str(system).startswith("/"):
        system = f"/redfish/v1/Systems/{system}"
    info = {"address": addr.rstrip("/"), "system_id": system, "username": entry.get("pm_user"),
            "password": entry.get("pm_password"), "verify_ca": entry.get("redfish_verify_ca", True)}
    return {k: v for k, v in info.items() if v is not None}


def endpoint(info: dict) -> tuple:
    """A BMC's session: its address and the credentials (systems behind it differ by system_id)."""
    return (info.get("address"), info.get("username"), info.get("password"), info.get("verify_ca", True))


def bmc_key(info: dict) -> str:
    return f"redfish|{info.get('address')}|{info.get('system_id') or ''}"


def required() -> tuple[str, ...]:
    return ("pm_addr", "pm_user", "pm_password")
