"""An OpenStack cloud in memory (Nova, Glance, Neutron) answering the openstacksdk calls that
the `openstack` realiser and node driver make: for fast unit tests of their own logic. The
real proof runs on the overcloud's own Nova (tests/e2e/test_overcloud.py)."""

from __future__ import annotations

import itertools
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace


def _copy(srv):
    """What openstacksdk hands out: a resource read at that moment, not the server itself."""
    return None if srv is None else SimpleNamespace(**vars(srv))


class FakeCloud:
    """Nova, Glance and Neutron in memory, as the realiser calls them."""

    def __init__(self):
        self.flavors = {"m1.small": SimpleNamespace(id="f-1", name="m1.small", vcpus=1, ram=1024, disk=10)}
        self.nets = {"lab": SimpleNamespace(id="net-1", name="lab")}
        self.imgs: dict[str, SimpleNamespace] = {}
        self.srvs: dict[str, SimpleNamespace] = {}
        self.uploads: list[dict] = []
        self.fail: dict[str, Exception] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.compute = SimpleNamespace(
            find_flavor=lambda name, ignore_missing: self.flavors.get(name),
            flavors=lambda: list(self.flavors.values()),
            find_server=lambda ref, ignore_missing: _copy(self.srvs.get(ref) or next(  # by id, else by name
                (x for x in list(self.srvs.values()) if x.name == ref), None)),
            servers=lambda name: [s for s in list(self.srvs.values()) if re.search(name, s.name)],  # Nova: a regex
            get_server=self._get_server, wait_for_delete=lambda s, wait: None,
            create_flavor=self._create_flavor, delete_flavor=lambda f: self.flavors.pop(f.name),
            create_server=self._create_server, delete_server=self._delete_server,
            start_server=lambda s: self._act(s, "start", "ACTIVE"), stop_server=lambda s: self._act(s, "stop", "SHUTOFF"),
            reboot_server=lambda s, kind: self._act(s, f"reboot {kind}", "HARD_REBOOT"),
            get_flavor=lambda ref: next(f for f in self.flavors.values() if f.id == ref),
            wait_for_server=self._wait_for_server,
            get_server_console_output=lambda s, length: {"output": "login:\n"},
            rescue_server=self._rescue, unrescue_server=self._unrescue,
            set_server_metadata=lambda s, **kw: self._metadata(s).update(kw),
            delete_server_metadata=lambda s, keys: [self._metadata(s).pop(k, None) for k in keys])
        self.image = SimpleNamespace(
            images=lambda name: [i for i in self.imgs.values() if i.name == name],
            find_image=lambda ref, ignore_missing: self.imgs.get(ref) or next(
                (i for i in self.imgs.values() if i.name == ref), None),
            delete_image=lambda i: self.imgs.pop(i.id))
        self.network = SimpleNamespace(find_network=lambda ref, ignore_missing: self.nets.get(ref),
                                       networks=lambda: list(self.nets.values()),
                                       create_network=self._create_network, delete_network=self._delete_network,
                                       create_subnet=lambda **kw: self.subnets.append(kw),
                                       ports=lambda device_id: [
                                           SimpleNamespace(mac_address=m, fixed_ips=[
                                               {"ip_address": f"10.9.0.{201 + i}", "subnet_id": "sub-1"}])
                                           for i, m in enumerate(self.srvs[device_id].macs)],
                                       get_subnet=lambda ref: SimpleNamespace(id=ref, cidr="10.9.0.0/24"))
        self.actions: list[tuple[str, str]] = []
        self.subnets: list[dict] = []

    def _check(self, op: str) -> None:
        if op in self.fail:
            raise self.fail[op]

    def create_image(self, name, filename, disk_format, container_format, wait, timeout, **props):
        self._check("upload")
        time.sleep(0.2)  # an upload takes a while: a second create meanwhile must wait for it
        with self._lock:
            img = SimpleNamespace(id=f"img-{next(self._ids)}", name=name, status="active", properties=props)
            self.imgs[img.id] = img
            self.uploads.append({"name": name, "file": filename, "disk_format": disk_format,
                                 "bytes": Path(filename).read_bytes(), **props})
        return img

    def _metadata(self, srv) -> dict:
        if self.srvs[srv.id].status == "RESCUE":  # Nova: vm_state rescued takes no metadata
            raise RuntimeError(f"ConflictException: 409: Cannot 'update_instance_metadata' instance {srv.id} "
                               "while it is in vm_state rescued")
        return self.srvs[srv.id].metadata

    def _rescue(self, srv, image):
        """Nova's stable device rescue: the server boots the image, as a CD, its disk kept."""
        self._check("rescue")
        assert self.srvs[srv.id].status in ("ACTIVE", "SHUTOFF"), self.srvs[srv.id].status
        assert self.imgs[image].properties.get("hw_rescue_device") == "cdrom"
        self.actions.append((srv.name, f"rescue {image}"))
        self.srvs[srv.id].status = "RESCUE"

    def _unrescue(self, srv):
        assert self.srvs[srv.id].status == "RESCUE"
        self.actions.append((srv.name, "unrescue"))
        self.srvs[srv.id].status = "ACTIVE"

    def _create_flavor(self, name, vcpus, ram, disk):
        self.flavors[name] = SimpleNamespace(id=f"f-{name}", name=name, vcpus=vcpus, ram=ram, disk=disk)
        return self.flavors[name]

    def _create_network(self, name):
        self.nets[name] = SimpleNamespace(id=f"net-{next(self._ids)}", name=name)
        return self.nets[name]

    def _delete_network(self, net):
        if any(n.get("uuid") == net.id for s in self.srvs.values() for n in s.networks):
            raise RuntimeError(f"ConflictException: 409: Unable to complete operation on network {net.id}. "
                               "There are one or more ports still in use on the network.")
        self.nets.pop(net.name)

    def _get_server(self, ref):
        srv = self.srvs[ref]
        if srv.status == "BUILD":  # booted by the next look
            self.boot(srv)
        return _copy(srv)

    def _create_server(self, name, image_id, flavor_id, networks, metadata, config_drive=False, user_data=None):
        self._check("create")
        with self._lock:
            srv = SimpleNamespace(id=f"nova-{next(self._ids)}", name=name, status="BUILD", task_state="spawning",
                                  metadata=metadata, addresses={}, fault=None, image_id=image_id, flavor_id=flavor_id,
                                  networks=networks, config_drive=config_drive, user_data=user_data,
                                  flavor=next(({"vcpus": f.vcpus, "ram": f.ram, "disk": f.disk}
                                               for f in self.flavors.values() if f.id == flavor_id),
                                              {"vcpus": 1, "ram": 1024, "disk": 10}),
                                  macs=["fa:16:3e:00:00:01"])
            self.srvs[srv.id] = srv
        return srv

    def _act(self, srv, action: str, status: str) -> None:
        self._check(action.split()[0])
        self.actions.append((srv.name, action))
        self.srvs[srv.id].status = status  # the caller's copy stays as it was, as openstacksdk's does

    def _wait_for_server(self, srv, status, wait):
        """openstacksdk's: a copy already in `status` is done without a look; else it reads the
        server until it is (here: a hard reboot ends at the first look)."""
        if srv.status == status:
            return srv
        srv = self.srvs[srv.id]
        if srv.status == "HARD_REBOOT":
            srv.status = "ACTIVE"
        assert srv.status == status, (srv.status, status)
        return _copy(srv)

    def _delete_server(self, srv, ignore_missing):
        self.srvs.pop(srv.id, None)

    def boot(self, srv, address="10.9.0.201"):
        srv.status, srv.task_state, srv.addresses = "ACTIVE", None, {"lab": [{"addr": address, "version": 4}]}
