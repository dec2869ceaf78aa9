"""OpenStack servers: a node is a Nova server of a cloud the undercloud knows (QuintupleO's
"deploy overcloud without PXE boot", issue 15).

A server's hypervisor type is `openstack:<cloud>` (a cloud of `undercloud cloud add`); its
flavor reference `openstack:<cloud>/<flavor>` names a flavor *of that cloud*, its networks
networks of that cloud (by name or id). Through openstacksdk only:
- **Image**: the undercloud's VM node image (qcow2) is uploaded to the cloud's Glance once
  per content: found again by its property `undercloud_sha256`, named `<name>-<sha256[:12]>`.
  It stays when servers go (a cache; `openstack image delete` removes it).
- **First-boot data** goes as the server's `user_data` on a config drive: the JSON
  `{"undercloud": <agent configuration>}` (a real Nova passes no vendor data of ours); the
  node image's `firstboot` reads it there. The server's own user data is inside it.
- **Where the agent reaches the undercloud**: the undercloud's address on its route to the
  cloud's auth host (`route_source`), where it then also serves its API. For a cloud on one
  of the undercloud's lab networks (its own overcloud, whose flat provider network
  `datacentre` is bridged to the lab bridge) that is the bridge's address; for a cloud
  elsewhere the instances must be able to reach that address (docs/quintupleo.md).
- The server carries metadata `undercloud_server` = the undercloud's server id, so a resumed
  create finds it instead of making a second. Delete removes the server; its ports are
  Nova's (made for it) and go with it.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import socket
import threading
import time
from urllib.parse import urlparse

from undercloud import server_types
from undercloud.errors import UndercloudError
from undercloud.host.run import route_source
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
    check_fixed_ip,
)

log = logging.getLogger("undercloud.servers.openstack")
SHA_PROPERTY = "undercloud_sha256"
SERVER_KEY = "undercloud_server"
SHUTDOWN_GRACE = 20  # seconds
_uploads: dict[tuple[str, str], threading.Lock] = {}  # (cloud, sha256) -> one upload at a time
_uploads_lock = threading.Lock()


class OpenStackRealiser(Realiser):
    hypervisor_type = server_types.OPENSTACK
    disk_formats = ("qcow2",)
    image_hypervisor_type = server_types.VM  # the node image it uploads is the VM one
    remote = True                 # the cloud places its servers: no hypervisor host here
    build_timeout = 900.0         # upload + Nova's image download + boot

    def __init__(self, env, cloud: str):
        super().__init__(env)
        self.cloud = cloud
        self._conn, self._config = None, None
        self._lock = threading.Lock()

    # ---- the cloud -----------------------------------------------------------------
    def conn(self):
        """A connection to the cloud, made again when its entry changed (removed and added anew)."""
        from undercloud.provisioning.clouds import connect

        if self.env.clouds is None:
            raise RealiserError("no clouds in this undercloud")
        config = self.env.clouds.config(self.cloud)
        with self._lock:
            if self._conn is None or config != self._config:
                self._conn, self._config = connect(self.cloud, config), config
            return self._conn

    def _call(self, what: str, fn, *args, **kwargs):
        from undercloud.provisioning.clouds import call

        return call(RealiserError, f"cloud {self.cloud}", what, fn, *args, **kwargs)

    def available(self) -> str | None:
        try:
            self.conn()
        except Exception as exc:  # noqa: BLE001 - the reason is the message
            return getattr(exc, "message", None) or str(exc)
        return None

    def flavor(self, name: str) -> dict:
        """The cloud's flavor `name` as a flavor record of this undercloud."""
        f = self._call(f"flavor {name}", self.conn().compute.find_flavor, name, ignore_missing=True)
        if f is None:
            have = sorted(x.name for x in self._call("flavors", self.conn().compute.flavors))
            raise RealiserError(f"cloud {self.cloud} has no flavor {name!r} (flavors: {', '.join(have) or 'none'})")
        return {"name": f.name, "vcpus": f.vcpus, "ram": f.ram, "disk": f.disk,
                "properties": {"hypervisor_type": f"openstack:{self.cloud}", "cloud_flavor_id": f.id}}

    def check_networks(self, networks: list | None) -> list[dict]:
        if not networks:
            raise RealiserError(f"servers in cloud {self.cloud} need a network of it "
                                f"(OvercloudNetwork, or `networks` of the server)")
        out = []
        for i, n in enumerate(networks):
            if not isinstance(n, dict) or not isinstance(n.get("network"), str) or not n["network"]:
                raise RealiserError(f"networks[{i}]: a mapping naming a network of cloud {self.cloud}")
            net = self._call(f"network {n['network']}", self.conn().network.find_network, n["network"],
                             ignore_missing=True)
            if net is None:
                have = sorted(x.name for x in self._call("networks", self.conn().network.networks))
                raise RealiserError(f"cloud {self.cloud} has no network {n['network']!r} "
                                    f"(networks: {', '.join(have) or 'none'})")
            ip = check_fixed_ip(n.get("fixed_ip"), f"networks[{i}].fixed_ip")
            out.append({"network": net.name, "network_id": net.id, "fixed_ip": ip})
        return out

    def agent_url(self, spec: Spec) -> str:
        host = urlparse(self.env.clouds.config(self.cloud)["auth"]["auth_url"]).hostname or ""
        try:
            address = socket.gethostbyname(host)
        except OSError as exc:
            raise RealiserError(f"cloud {self.cloud}: cannot resolve {host}: {exc}") from None
        try:
            source = route_source(address)
        except UndercloudError as exc:
            raise RealiserError(exc.message) from None
        self.env.listen(source)
        return self.env.agent_url(source)

    def startup(self) -> None:
        self.agent_url(None)  # serve the API again where this cloud's servers reach it

    # ---- servers -------------------------------------------------------------------
    def _image(self, spec: Spec) -> str:
        """The cloud's copy of the node image (uploaded once per content); its id."""
        sha = spec.image.get("checksum")
        if not sha or not spec.image_path:
            raise RealiserError(f"image {spec.image.get('name')} has no content in the image store")
        conn = self.conn()
        with _uploads_lock:
            lock = _uploads.setdefault((self.cloud, sha), threading.Lock())
        name = f"{spec.image.get('name')}-{sha[:12]}"
        with lock:
            for img in self._call("images", conn.image.images, name=name):
                if img.status == "active" and (img.properties or {}).get(SHA_PROPERTY) == sha:
                    return img.id
            t0 = time.monotonic()
            img = self._call(f"upload of {name}", conn.create_image, name, filename=str(spec.image_path),
                             disk_format="qcow2", container_format="bare", wait=True, timeout=1800,
                             # power off: Nova's ACPI grace before it pulls the plug (as the vm realiser)
                             os_shutdown_timeout=str(SHUTDOWN_GRACE), **{SHA_PROPERTY: sha})
            log.info("cloud %s: uploaded %s as %s in %.1f s", self.cloud, name, img.id, time.monotonic() - t0)
            return img.id

    def _find(self, spec: Spec):
        conn = self.conn()
        if spec.state.get("server"):
            return self._call("server", conn.compute.find_server, spec.state["server"], ignore_missing=True)
        for srv in self._call("servers", conn.compute.servers, name=f"^{re.escape(spec.name)}$"):
            if (srv.metadata or {}).get(SERVER_KEY) == spec.id:
                return srv
        return None

    def create(self, spec: Spec) -> None:
        found = self._find(spec)
        if found is not None:  # a resumed create
            spec.state["server"] = found.id
            return
        image = self._image(spec)
        conn = self.conn()
        agent = {k: v for k, v in spec.first_boot.items()}
        user_data = base64.b64encode(json.dumps({"undercloud": agent}).encode()).decode()
        nets = [{"uuid": n["network_id"], **({"fixed_ip": n["fixed_ip"]} if n.get("fixed_ip") else {})}
                for n in spec.networks]
        srv = self._call("server create", conn.compute.create_server, name=spec.name, image_id=image,
                         flavor_id=spec.flavor["properties"]["cloud_flavor_id"], networks=nets,
                         config_drive=True, user_data=user_data,
                         metadata={SERVER_KEY: spec.id, "undercloud_instance": self.env.home.instance})
        spec.state.update(server=srv.id, instance_name=f"{self.cloud}:{srv.id}", image=image)

    def status(self, spec: Spec) -> Status:
        srv = self._find(spec)
        if srv is None:
            return Status(DELETED)
        addresses = {net: [a["addr"] for a in addrs if a.get("version", 4) == 4]
                     for net, addrs in (srv.addresses or {}).items()}
        st = (srv.status or "").upper()
        if st == "ACTIVE":
            return Status(ACTIVE, addresses=addresses)
        if st == "SHUTOFF":
            return Status(SHUTOFF, addresses=addresses)
        if st == "ERROR":
            fault = (srv.fault or {}).get("message") or "no reason given"
            return Status(ERROR, reason=f"cloud {self.cloud}: server {srv.id} in ERROR: {fault}")
        if st == "SOFT_DELETED":  # kept for reclaim_instance_interval: gone as far as we are concerned
            return Status(DELETED)
        if st == "DELETED":  # Nova (2025.1) lists it so while its delete finishes: not gone yet
            return Status(BUILD, addresses=addresses, reason=f"cloud {self.cloud}: server {srv.id} being deleted")
        return Status(BUILD, addresses=addresses, reason=f"cloud {self.cloud}: server {srv.id} {st or 'BUILD'}"
                      + (f" ({srv.task_state})" if getattr(srv, "task_state", None) else ""))

    def power(self, spec: Spec, on: bool) -> None:
        srv = self._find(spec)
        if srv is None:
            raise RealiserError(f"cloud {self.cloud}: server {spec.name} is gone")
        conn = self.conn()
        if on and srv.status != "ACTIVE":
            self._call("server start", conn.compute.start_server, srv)
            self._call("server start", conn.compute.wait_for_server, srv, status="ACTIVE", wait=300)
        elif not on and srv.status != "SHUTOFF":
            self._call("server stop", conn.compute.stop_server, srv)
            self._call("server stop", conn.compute.wait_for_server, srv, status="SHUTOFF", wait=300)

    def delete(self, spec: Spec) -> None:
        srv = self._find(spec)
        if srv is not None:
            self._call("server delete", self.conn().compute.delete_server, srv, ignore_missing=True)

    def console(self, spec: Spec, lines: int = 100) -> str:
        srv = self._find(spec)
        if srv is None:
            raise RealiserError(f"cloud {self.cloud}: server {spec.name} is gone")
        out = self._call("console log", self.conn().compute.get_server_console_output, srv, length=lines)
        return (out or {}).get("output", "")
