"""`fake`: no machine behind it. For unit tests and scale benchmarks, never as proof.

driver_info: `address` (any unique string), optional `delay` (seconds for every BMC
call, or a dict per operation: login, validate, power, boot, inventory), `fail`
(operations that raise, e.g. ["validate"] behaves like a wrong password, ["login"] like a BMC
that does not answer) and `inventory`.
The "machines" live in this process's memory, keyed by address. An address `bmc/system`
is one system of a BMC serving several (as a Redfish chassis manager does): the nodes behind
one BMC share its session within a batch of node work; `logins` counts the sessions opened
per BMC (what batching saves).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from undercloud.provisioning.drivers import (
    BMCAuthFailed,
    BootInterface,
    Driver,
    DriverError,
    ManagementInterface,
    MediaInterface,
    PowerInterface,
)

_machines: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()
logins: dict[str, int] = {}  # BMC -> sessions opened with it

DEFAULT_INVENTORY = {"cpus": 2, "memory_mb": 4096, "local_gb": 40, "cpu_arch": "x86_64", "macs": []}


class FakePower(PowerInterface):
    name = "fake"

    def get(self) -> str:
        self.driver._step("power")
        return self.driver._machine()["power"]

    def set(self, action: str) -> None:
        self.driver._step("power")
        self.driver._machine()["power"] = "off" if action == "off" else "on"


class FakeManagement(ManagementInterface):
    name = "fake"

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        self.driver._step("boot")
        self.driver._machine()["boot"] = device

    def boot_mode(self) -> str | None:
        return self.driver._machine().get("boot_mode", "bios")

    def set_boot_mode(self, mode: str) -> None:
        self.driver._step("boot")
        self.driver._machine()["boot_mode"] = mode

    def inventory(self) -> dict | None:
        self.driver._step("inventory")
        return {**DEFAULT_INVENTORY, **self.driver.info.get("inventory", {})}


class FakeMedia(MediaInterface):
    name = "fake"

    def insert(self, url: str) -> None:
        self.driver._machine()["media"] = url

    def eject(self) -> None:
        self.driver._machine()["media"] = None


class FakeDriver(Driver):
    name = "fake"
    power_interface, management_interface, media_interface = FakePower, FakeManagement, FakeMedia
    boot_interfaces = (BootInterface.VIRTUAL_MEDIA, BootInterface.PXE)

    def _machine(self) -> dict[str, Any]:
        with _lock:
            return _machines.setdefault(self.info["address"], {"power": "off", "boot": "disk", "media": None})

    def _step(self, op: str) -> None:
        key = ("fake", *endpoint(self.info))
        if key not in self.sessions:  # the first call on this BMC in this batch (or operation)
            self._delay("login")
            with _lock:
                logins[key[1]] = logins.get(key[1], 0) + 1
            if "login" in self.info.get("fail", ()):
                raise DriverError(f"{self.where}: no answer to the login (fake)")
            self.sessions[key] = "session"
        self._delay(op)
        if op in self.info.get("fail", ()):
            if op == "validate":
                raise BMCAuthFailed(f"{self.where} refused the credentials of user {self.info.get('username')!r}")
            raise DriverError(f"{self.where}: {op} failed (fake)")

    def _delay(self, op: str) -> None:
        delay = self.info.get("delay", 0)
        delay = delay.get(op, 0) if isinstance(delay, dict) else delay
        if delay:
            time.sleep(float(delay))

    def validate(self) -> None:
        self._step("validate")


DRIVER = FakeDriver


def from_instackenv(entry: dict) -> dict:
    info = {"address": str(entry.get("pm_addr") or entry.get("name") or ""), "username": entry.get("pm_user"),
            "password": entry.get("pm_password")}
    return {k: v for k, v in info.items() if v is not None}


def endpoint(info: dict) -> tuple:
    """The BMC behind `address` (`bmc/system`: bmc) and the credentials its session uses."""
    return str(info.get("address", "")).split("/", 1)[0], info.get("username"), info.get("password")


def bmc_key(info: dict) -> str:
    return f"fake|{info.get('address')}"


def required() -> tuple[str, ...]:
    return ("pm_addr",)


def machine_state(address: str) -> dict[str, Any]:
    """The fake machine behind `address` (tests use it to cause power drift)."""
    with _lock:
        return _machines.setdefault(address, {"power": "off", "boot": "disk", "media": None})


def reset() -> None:
    with _lock:
        _machines.clear()
        logins.clear()
