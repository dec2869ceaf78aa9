"""`openstack`: a Nova server of a cloud the undercloud knows, as a node (QuintupleO's virtual
power driver): its power and power state are Nova's, its inventory its flavor's.

driver_info: `cloud` (a cloud of `undercloud cloud add`), `server` (the server's id or
name there). instackenv.json: `"pm_type": "openstack", "cloud": "host", "server": "bm-0"`.
Power on/off/reboot are Nova's start, stop and hard reboot, each waited for; a server in
another state (BUILD, RESCUE, ERROR...) is an error naming it. Not yet: deploying an image
onto the server's disk (Nova rescue with the deploy ramdisk): boot devices and virtual
media are refused, so nodes of this driver can be managed, inspected and powered, not
deployed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from undercloud.provisioning.drivers import Driver, DriverError

POWER_WAIT = 300  # seconds for Nova to reach the state asked for (a stop waits out the guest's ACPI grace)
# The clouds' entries by name: the service sets it at start (provisioning.clouds.Clouds.config).
cloud_config: Callable[[str], dict] | None = None
_connections: dict[tuple[str, str], object] = {}
_lock = threading.Lock()


class OpenStackDriver(Driver):
    name = "openstack"

    @property
    def where(self) -> str:
        return f"cloud {self.info.get('cloud')} server {self.info.get('server')}"

    def _call(self, what: str, fn, *args, **kwargs):
        from undercloud.provisioning.clouds import call

        return call(DriverError, self.where, what, fn, *args, **kwargs)

    def _conn(self):
        """One connection per cloud entry for the process (drivers are made per operation)."""
        from undercloud.errors import UndercloudError
        from undercloud.provisioning.clouds import connect

        if cloud_config is None:
            raise DriverError(f"{self.where}: this process knows no clouds")
        try:
            config = cloud_config(self.info["cloud"])
            key = (self.info["cloud"], json.dumps(config, sort_keys=True))
            with _lock:
                if key not in _connections:
                    _connections[key] = connect(self.info["cloud"], config)
                return _connections[key]
        except UndercloudError as exc:
            raise DriverError(exc.message) from None

    def _server(self, conn=None):
        conn = conn or self._conn()
        srv = self._call("find", conn.compute.find_server, self.info["server"], ignore_missing=True)
        if srv is None:
            raise DriverError(f"{self.where}: no such server in the cloud")
        return conn, srv

    def get_power(self) -> str:
        _conn, srv = self._server()
        if srv.status in ("ACTIVE", "REBOOT", "HARD_REBOOT"):  # rebooting: on, as a BMC says
            return "on"
        if srv.status == "SHUTOFF":
            return "off"
        raise DriverError(f"{self.where} is {srv.status}" + (f" ({srv.task_state})" if srv.task_state else ""))

    def set_power(self, action: str) -> None:
        conn, srv = self._server()
        if action == "reboot" and srv.status == "ACTIVE":
            self._call("reboot", conn.compute.reboot_server, srv, "HARD")
            # read it again: the copy in hand still says ACTIVE, which the wait would take as done
            srv = self._call("reboot", conn.compute.get_server, srv.id)
        elif action in ("on", "reboot") and srv.status != "ACTIVE":
            self._call("start", conn.compute.start_server, srv)
        elif action == "off" and srv.status != "SHUTOFF":
            self._call("stop", conn.compute.stop_server, srv)
        want = "SHUTOFF" if action == "off" else "ACTIVE"
        self._call(f"wait for {want}", conn.compute.wait_for_server, srv, status=want, wait=POWER_WAIT)

    def set_boot_device(self, device: str, persistent: bool = False) -> None:
        if device != "disk":
            raise DriverError(f"{self.where}: boots from its disk only (deploying through Nova rescue is not there yet)")

    def inventory(self) -> dict | None:
        conn, srv = self._server()
        flavor = srv.flavor or {}
        if not flavor.get("ram"):  # older microversions name the flavor only
            f = self._call("flavor", conn.compute.get_flavor, flavor.get("id"))
            flavor = {"vcpus": f.vcpus, "ram": f.ram, "disk": f.disk}
        ports = self._call("ports", conn.network.ports, device_id=srv.id)
        return {"cpus": flavor.get("vcpus"), "memory_mb": flavor.get("ram"), "local_gb": flavor.get("disk"),
                "cpu_arch": "x86_64", "macs": sorted(p.mac_address for p in ports)}


DRIVER = OpenStackDriver


def from_instackenv(entry: dict) -> dict:
    return {"cloud": str(entry["cloud"]), "server": str(entry["server"])}


def bmc_key(info: dict) -> str:
    return f"openstack|{info.get('cloud')}|{info.get('server')}"


def required() -> tuple[str, ...]:
    return ("cloud", "server")
