"""`ipmi`: an IPMI BMC through pyghmi: power and boot device (no inventory over IPMI).

driver_info: `address`, `port` (default 623), `username`, `password`.
"""

from __future__ import annotations

import threading
import time

from undercloud.provisioning.drivers import (
    BMCAuthFailed,
    Driver,
    DriverError,
    ManagementInterface,
    PowerInterface,
)

BOOT = {"pxe": "network", "disk": "hd", "cd": "cdrom"}
BOOT_BACK = {v: k for k, v in BOOT.items()}
POWER_WAIT = 30  # seconds pyghmi waits for the BMC to report the new power state
# Calls on a session that stops answering, each on a fresh login, 2, 4, 6 s apart: a lab BMC
# (one process for every node) answers nothing while libvirt redefines or stops a domain,
# which takes seconds on a busy host.
ATTEMPTS = 4


# pyghmi shares one session per BMC between threads, and building a second Command for a
# BMC whose session is alive can hang; so we keep one Command per BMC (and credentials)
# for the process, and let one call at a time use it.
_sessions: dict[tuple, object] = {}
_locks: dict[tuple, threading.Lock] = {}
_guard = threading.Lock()


def _lock(key: tuple) -> threading.Lock:
    with _guard:
        return _locks.setdefault(key, threading.Lock())


def _session(key: tuple, command):
    address, port, user, password = key
    try:
        cmd = command.Command(bmc=address, userid=user, password=password, port=port)
    except Exception:
        _unlist(key)  # pyghmi keeps a failed login around and would hand it to the next attempt
        raise
    _sessions[key] = cmd
    return cmd


def _unlist(key: tuple) -> None:
    """pyghmi's constructor hands back the session it lists for these credentials, broken or
    not; its own clean-up (Session._mark_broken) looks for it under the bytes it encoded them
    to, which is not how it is listed, so a broken one stays and comes back."""
    from pyghmi.ipmi.private import session

    address, port, user, password = key
    getattr(session.Session, "initting_sessions", {}).pop((address, user, password, port, None), None)


def _forget(key: tuple) -> None:
    """Drop our session and make pyghmi drop it too: its constructor hands back a session it
    still takes for logged in, and a command that timed out leaves it so."""
    cmd = _sessions.pop(key, None)
    session = getattr(cmd, "ipmi_session", None)
    if session is not None:
        try:
            session._mark_broken()
        except Exception:  # noqa: BLE001 - the session is being thrown away either way
            pass
    _unlist(key)


def _command():
    try:
        from pyghmi import exceptions
        from pyghmi.ipmi import command
    except ImportError:
        raise DriverError("the ipmi driver needs pyghmi: pip install 'undercloud[lab]'") from None
    return command, exceptions


class IpmiPower(PowerInterface):
    name = "ipmi"

    def get(self) -> str:
        return self.driver.call("read power", lambda c: c.get_power()["powerstate"])

    def set(self, action: str) -> None:
        call = self.driver.call
        if action == "reboot":
            # Off, then on (as Ironic's ipmitool does): a boot device set just before then
            # applies on every BMC. virtualbmc applies one only when the domain starts again,
            # so a reset would boot the device of before.
            call("power off (reboot)", lambda c: c.set_power("off", wait=POWER_WAIT))
            call("power on (reboot)", lambda c: c.set_power("on", wait=POWER_WAIT))
            return
        call(f"power {action}", lambda c: c.set_power(action, wait=POWER_WAIT))


class IpmiManagement(ManagementInterface):
    name = "ipmi"

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        self.driver.call(f"set boot device {device}", lambda c: c.set_bootdev(BOOT[device], persist=persistent))

    def boot_device(self) -> tuple[str, bool]:
        """(device, persistent) as the BMC reports it."""
        got = self.driver.call("read the boot device", lambda c: c.get_bootdev())
        return BOOT_BACK.get(got.get("bootdev"), got.get("bootdev")), bool(got.get("persistent"))


class IpmiDriver(Driver):
    name = "ipmi"
    power_interface, management_interface = IpmiPower, IpmiManagement

    @property
    def where(self) -> str:
        return f"ipmi BMC {self.info.get('address')}:{self.info.get('port', 623)}"

    def call(self, what: str, fn):
        """`fn(command)` with this BMC's session, its failures as DriverError naming the BMC."""
        command, exceptions = _command()
        key = (self.info["address"], int(self.info.get("port", 623)), self.info.get("username"),
               self.info.get("password"))
        try:
            with _lock(key):
                for attempt in range(1, ATTEMPTS + 1):
                    cmd = None
                    try:
                        cmd = _sessions.get(key) or _session(key, command)
                        return fn(cmd)
                    except (exceptions.IpmiException, TypeError):
                        # A stale session (BMC restarted) or a BMC too busy to answer in time
                        # (a lab BMC starting a domain): log in again; every call is idempotent.
                        # A first login that fails is final (wrong address or credentials); one
                        # after a lost session is retried, the BMC may still be busy. TypeError:
                        # pyghmi's own new login after a late answer leaves the session marked
                        # as logging in without a deadline, and its next command compares that
                        # deadline (None) with the time: the session is lost all the same.
                        _forget(key)
                        if attempt == ATTEMPTS or (cmd is None and attempt == 1):
                            raise
                        time.sleep(2 * attempt)
        except exceptions.IpmiException as exc:
            _forget(key)
            # pyghmi gives no reason when the BMC never answered the login
            msg = str(exc) if exc.args and exc.args[0] else "no answer to the login (wrong address, port or credentials?)"
            if "password" in msg.lower() or "unauthorized" in msg.lower() or "user" in msg.lower():
                raise BMCAuthFailed(f"{self.where} refused the credentials of user "
                                  f"{self.info.get('username')!r} ({msg})") from None
            raise DriverError(f"{self.where}: {what}: {msg}") from None


DRIVER = IpmiDriver


def from_instackenv(entry: dict) -> dict:
    info = {"address": str(entry["pm_addr"]), "port": int(entry.get("pm_port") or 623),
            "username": entry.get("pm_user"), "password": entry.get("pm_password")}
    return {k: v for k, v in info.items() if v is not None}


def endpoint(info: dict) -> tuple:
    """The BMC's session (kept for the process, one call at a time): nodes on it run in turn."""
    return (info.get("address"), int(info.get("port", 623)), info.get("username"), info.get("password"))


def bmc_key(info: dict) -> str:
    return f"ipmi|{info.get('address')}|{info.get('port', 623)}"


def required() -> tuple[str, ...]:
    return ("pm_addr", "pm_user", "pm_password")
