"""A lab in a cloud: empty Nova servers to enrol as nodes of driver `openstack` (QuintupleO's
virtual bare metal; `undercloud lab up --cloud NAME`).

Everything is named after the undercloud's instance (`<instance>-lab`), so `down` finds
what `up` made and nothing else: the servers `<instance>-lab-<i>` (metadata
`undercloud_lab`), and, only where `up` was not told which to use, a flavor `<instance>-lab`
(1 vCPU, 1 GB, 10 GB), a network `<instance>-lab` with a subnet, and an empty boot image
`<instance>-lab-empty` (a blank disk: the server is ACTIVE with nothing to boot, as a
machine without an OS). `up` is idempotent: it makes the servers that are missing up to N
and writes every one into the instackenv it returns (`pm_type: openstack`, `cloud`,
`server`, its port's MAC, the flavor's sizes).
"""

from __future__ import annotations

import logging
import tempfile
import time

from undercloud.errors import InvalidInput, UndercloudError
from undercloud.names import check_name
from undercloud.provisioning.clouds import call, connect

log = logging.getLogger("undercloud.cloud_lab")
LAB_KEY = "undercloud_lab"
FLAVOR = {"vcpus": 1, "ram": 2048, "disk": 10}  # the deploy ramdisk holds the image in memory
SUBNET = "192.168.250.0/24"  # inside the cloud's own network of the lab (no route out)
EMPTY_MB = 1
ACTIVE_WAIT = 600  # seconds for the servers to be ACTIVE
POLL = 2.0


class CloudLabError(UndercloudError):
    pass


class CloudLab:
    def __init__(self, clouds, instance: str):
        self.clouds, self.instance = clouds, instance
        self.prefix = f"{instance}-lab"

    def _conn(self, cloud: str):
        check_name(cloud, "cloud")
        return connect(cloud, self.clouds.config(cloud))

    @staticmethod
    def _call(cloud: str, what: str, fn, *args, **kwargs):
        return call(CloudLabError, f"cloud {cloud}", what, fn, *args, **kwargs)

    def _mine(self, conn, cloud: str) -> list:
        return [s for s in self._call(cloud, "servers", conn.compute.servers, name=f"^{self.prefix}-")
                if (s.metadata or {}).get(LAB_KEY) == self.instance]

    def up(self, cloud: str, count: int, flavor: str | None = None, network: str | None = None,
           image: str | None = None) -> dict:
        if not isinstance(count, int) or not 1 <= count <= 100:
            raise InvalidInput("--nodes: 1 to 100", "nodes")
        conn = self._conn(cloud)
        call = lambda what, fn, *a, **k: self._call(cloud, what, fn, *a, **k)  # noqa: E731
        # What it was told to use must exist: checked before anything is made.
        fl = self._named(cloud, "flavor", flavor, call("flavors", conn.compute.find_flavor, flavor,
                                                          ignore_missing=True) if flavor else None)
        net = self._named(cloud, "network", network, call("networks", conn.network.find_network, network,
                                                            ignore_missing=True) if network else None)
        img = self._named(cloud, "image", image, call("images", conn.image.find_image, image,
                                                        ignore_missing=True) if image else None)
        made = []
        if fl is None:
            fl = call("flavor", conn.compute.find_flavor, self.prefix, ignore_missing=True)
            if fl is None:
                fl = call("flavor create", conn.compute.create_flavor, name=self.prefix, **FLAVOR)
                made.append(f"flavor {self.prefix}")
        if net is None:
            net = call("network", conn.network.find_network, self.prefix, ignore_missing=True)
            if net is None:
                net = call("network create", conn.network.create_network, name=self.prefix)
                call("subnet create", conn.network.create_subnet, name=self.prefix, network_id=net.id,
                     ip_version=4, cidr=SUBNET, enable_dhcp=False)
                made.append(f"network {self.prefix}")
        if img is None:
            name = f"{self.prefix}-empty"
            img = next(iter(call("image", conn.image.images, name=name)), None)
            if img is None:
                with tempfile.NamedTemporaryFile(suffix=".raw") as blank:
                    blank.truncate(EMPTY_MB << 20)
                    blank.flush()
                    img = call("image upload", conn.create_image, name, filename=blank.name, disk_format="raw",
                               container_format="bare", wait=True, timeout=600,
                               # nothing runs that could answer ACPI: power off pulls the plug at once
                               os_shutdown_timeout="0", **{LAB_KEY: self.instance})
                made.append(f"image {name}")
        have = {s.name for s in self._mine(conn, cloud)}
        for i in range(count):
            name = f"{self.prefix}-{i}"
            if name not in have:
                call(f"server create {name}", conn.compute.create_server, name=name, image_id=img.id,
                     flavor_id=fl.id, networks=[{"uuid": net.id}], metadata={LAB_KEY: self.instance})
                made.append(f"server {name}")
        nodes = []
        deadline = time.monotonic() + ACTIVE_WAIT
        for srv in sorted(self._mine(conn, cloud), key=lambda s: s.name):
            while srv.status != "ACTIVE":
                if srv.status == "ERROR" or time.monotonic() > deadline:
                    fault = (srv.fault or {}).get("message") or f"not ACTIVE after {ACTIVE_WAIT} s"
                    raise CloudLabError(f"cloud {cloud}: server {srv.name} is {srv.status}: {fault}")
                time.sleep(POLL)
                srv = call("server", conn.compute.get_server, srv.id)
            macs = sorted(p.mac_address for p in call("ports", conn.network.ports, device_id=srv.id))
            f = srv.flavor or {}
            nodes.append({"name": srv.name, "pm_type": "openstack", "cloud": cloud, "server": srv.id,
                          "ports": [{"address": m} for m in macs], "cpu": f.get("vcpus") or fl.vcpus,
                          "memory": f.get("ram") or fl.ram, "disk": f.get("disk") or fl.disk, "arch": "x86_64"})
        log.info("cloud %s: lab up, %d node(s)%s", cloud, len(nodes), f"; made {', '.join(made)}" if made else "")
        return {"cloud": cloud, "made": made, "instackenv": {"nodes": nodes}}

    @staticmethod
    def _named(cloud: str, kind: str, ref: str | None, found):
        if ref and found is None:
            raise CloudLabError(f"cloud {cloud} has no {kind} {ref!r}")
        return found

    def down(self, cloud: str) -> list[str]:
        """Remove the lab's servers, then the flavor, network and image it made (by name)."""
        conn = self._conn(cloud)
        call = lambda what, fn, *a, **k: self._call(cloud, what, fn, *a, **k)  # noqa: E731
        removed = []
        servers = self._mine(conn, cloud)
        for srv in servers:
            call(f"server delete {srv.name}", conn.compute.delete_server, srv, ignore_missing=True)
            removed.append(f"server {srv.name}")
        for srv in servers:  # the network goes only once their ports are gone
            call(f"server delete {srv.name}", conn.compute.wait_for_delete, srv, wait=300)
        fl = call("flavor", conn.compute.find_flavor, self.prefix, ignore_missing=True)
        if fl is not None:
            call("flavor delete", conn.compute.delete_flavor, fl)
            removed.append(f"flavor {self.prefix}")
        net = call("network", conn.network.find_network, self.prefix, ignore_missing=True)
        if net is not None:
            call("network delete", conn.network.delete_network, net)
            removed.append(f"network {self.prefix}")
        for img in call("image", conn.image.images, name=f"{self.prefix}-empty"):
            if (img.properties or {}).get(LAB_KEY) == self.instance:
                call("image delete", conn.image.delete_image, img)
                removed.append(f"image {img.name}")
        log.info("cloud %s: lab down: %s", cloud, ", ".join(removed) or "nothing to remove")
        return removed
