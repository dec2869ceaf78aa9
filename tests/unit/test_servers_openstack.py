"""Servers of another OpenStack cloud (provisioning/servers/openstack.py) through the real
servers service, engine-free, against an in-memory cloud that answers the openstacksdk
calls the realiser makes. The real proof is the e2e on the overcloud's own Nova
(tests/e2e/test_overcloud.py: test_quintupleo_...); these pin the realiser's own logic: the
image uploaded once per content, a resumed create that finds its server, statuses and
faults, one-line errors, nothing written for a bad request."""

from __future__ import annotations

import base64
import hashlib
import json
import threading

import pytest
from sqlalchemy import select

from tests.openstack_support import FakeCloud
from undercloud.api.context import Context
from undercloud.config import Home
from undercloud.errors import InvalidInput, NotFound, UndercloudError
from undercloud.provisioning.servers.base import Env
from undercloud.provisioning.servers.openstack import OpenStackRealiser
from undercloud.provisioning.servers.service import ServersService
from undercloud.store.clouds import Cloud
from undercloud.store.servers import Server


class UC:
    def __init__(self, tmp_path):
        self.ctx = Context(Home(tmp_path / "home"))
        env = Env(home=self.ctx.home, api_port=8, images=self.ctx.images, clouds=self.ctx.clouds,
                  ca=lambda: "-----BEGIN CERTIFICATE-----\nthe undercloud's CA\n")
        self.cloud = FakeCloud()
        self.realiser = OpenStackRealiser(env, "lab")
        self.servers = ServersService(self.ctx.store, env, realisers={"openstack:lab": self.realiser})
        config = {"auth": {"auth_url": "http://127.0.0.1:5000/v3", "password": "pw"}}
        with self.ctx.store.session() as s:
            s.add(Cloud(name="lab", config=config, source="test", created_at=0.0))
        self.realiser._conn, self.realiser._config = self.cloud, config  # what connect() would make
        content = b"qcow2 node image"
        self.sha = hashlib.sha256(content).hexdigest()
        self.ctx.images.put_blob([content], self.sha, len(content))
        self.image = self.ctx.images.register([{"name": "overcloud-full", "disk_format": "qcow2", "sha256": self.sha,
                                                "properties": {"hypervisor_type": "vm"}}])[0]

    def create(self, id="s1", name="inner-0", flavor="openstack:lab/m1.small", networks=None, **kw):
        return self.servers.create(id=id, name=name, flavor=flavor, image="overcloud-full",
                                   first_boot={"token": f"tok-{id}", "user_data": "#!/bin/sh\n"},
                                   networks=networks if networks is not None else [{"network": "lab"}], **kw)


@pytest.fixture
def uc(tmp_path):
    return UC(tmp_path)


def test_a_server_of_the_cloud_from_create_to_delete(uc):
    srv = uc.create(metadata={"role": "Controller"})
    assert (srv["status"], srv["hypervisor_type"], srv["host"]) == ("BUILD", "openstack:lab", None)
    assert (srv["flavor"], srv["flavor_detail"]["ram"], srv["networks"]) == (
        "m1.small", 1024, [{"network": "lab", "network_id": "net-1", "fixed_ip": None}])
    (nova,) = uc.cloud.srvs.values()
    assert (nova.name, nova.flavor_id, nova.networks, nova.config_drive) == ("inner-0", "f-1", [{"uuid": "net-1"}], True)
    assert nova.metadata["undercloud_server"] == "s1"
    agent = json.loads(base64.b64decode(nova.user_data))["undercloud"]
    assert (agent["server_id"], agent["token"], agent["hostname"], agent["user_data"]) == (
        "s1", "tok-s1", "inner-0", "#!/bin/sh\n")
    assert agent["url"] == "https://127.0.0.1:8"  # this host's address on its route to the cloud's auth host
    assert agent["ca"] == "-----BEGIN CERTIFICATE-----\nthe undercloud's CA\n"  # what the agent verifies it with
    (upload,) = uc.cloud.uploads
    assert upload == {"name": f"overcloud-full-{uc.sha[:12]}", "file": str(uc.ctx.images.blob_path(uc.sha)),
                      "disk_format": "qcow2", "undercloud_sha256": uc.sha, "os_shutdown_timeout": "20",
                      "bytes": b"qcow2 node image"}
    assert nova.image_id == next(iter(uc.cloud.imgs))
    assert uc.servers.refresh("s1")["status"] == "BUILD"
    uc.cloud.boot(nova)
    shown = uc.servers.refresh("s1")
    assert (shown["status"], shown["addresses"], shown["instance_name"]) == ("ACTIVE", {"lab": ["10.9.0.201"]},
                                                                            f"lab:{nova.id}")
    assert uc.servers.power("s1", False)["status"] == "SHUTOFF"
    assert uc.servers.power("s1", True)["status"] == "ACTIVE"
    assert uc.servers.console("s1") == "login:\n"
    uc.servers.delete("s1")
    assert uc.cloud.srvs == {} and not uc.servers.exists("s1")
    assert len(uc.cloud.imgs) == 1  # the cloud's copy of the image stays: a cache


def test_the_image_goes_up_once_for_servers_made_at_once(uc):
    threads = [threading.Thread(target=uc.create, kwargs={"id": f"s{i}", "name": f"inner-{i}"}) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(uc.cloud.uploads) == 1 and len(uc.cloud.srvs) == 3
    assert {s.image_id for s in uc.cloud.srvs.values()} == set(uc.cloud.imgs)
    uc.create(id="s9", name="inner-9")  # and not again later
    assert len(uc.cloud.uploads) == 1


def test_a_resumed_create_finds_the_server_nova_made(uc):
    """The service died after Nova made the server but before it kept its id: the repeated
    create finds it by its metadata and makes no second one."""
    uc.create()
    (nova,) = uc.cloud.srvs.values()
    with uc.ctx.store.session() as s:
        row = s.get(Server, "s1")
        row.state = {}
    uc.servers.resume("s1")
    assert list(uc.cloud.srvs) == [nova.id]
    with uc.ctx.store.session() as s:
        assert s.get(Server, "s1").state["server"] == nova.id


def test_nova_faults_and_refusals_become_the_servers_fault_in_one_line(uc):
    uc.create()
    (nova,) = uc.cloud.srvs.values()
    nova.status, nova.fault = "ERROR", {"message": "No valid host was found. There are not enough hosts available."}
    shown = uc.servers.refresh("s1")
    assert (shown["status"], shown["fault"]) == (
        "ERROR", f"cloud lab: server {nova.id} in ERROR: No valid host was found. There are not enough hosts available.")
    uc.cloud.fail["create"] = RuntimeError("HttpException: 403: Quota exceeded for instances:\nRequested 1")
    with pytest.raises(UndercloudError) as e:
        uc.create(id="s2", name="inner-2")
    assert e.value.message == "server inner-2: spawning failed: cloud lab: server create: HttpException: 403: " \
                              "Quota exceeded for instances: Requested 1"
    assert uc.servers.get("s2")["fault"].startswith("spawning: cloud lab: server create: HttpException: 403")
    # Nova lists a server DELETED while its delete finishes (2025.1): not gone yet; SOFT_DELETED
    # (kept to be reclaimed) and no server at all are gone.
    from undercloud.provisioning.servers.base import BUILD, DELETED, Spec
    spec = Spec(id="s1", name="inner-0", hypervisor_type="openstack:lab", flavor={}, image={}, image_path=None,
                first_boot={}, networks=[], state={"server": nova.id})
    uc.cloud.srvs[nova.id].status = "DELETED"
    assert uc.realiser.status(spec).status == BUILD and "being deleted" in uc.realiser.status(spec).reason
    uc.cloud.srvs[nova.id].status = "SOFT_DELETED"
    assert uc.realiser.status(spec).status == DELETED
    del uc.cloud.srvs[nova.id]  # removed outside the undercloud
    assert uc.servers.refresh("s1")["fault"] == "the machine is gone (removed outside the undercloud?)"


def test_bad_references_write_nothing_and_say_what_the_cloud_has(uc):
    with pytest.raises(NotFound) as e:
        uc.create(flavor="openstack:lab/m9.huge")
    assert e.value.message == "cloud lab has no flavor 'm9.huge' (flavors: m1.small)"
    with pytest.raises(InvalidInput) as e:
        uc.create(networks=[{"network": "nowhere"}])
    assert e.value.message == "cloud lab has no network 'nowhere' (networks: lab)"
    with pytest.raises(InvalidInput) as e:
        uc.create(networks=[])
    assert e.value.message.startswith("servers in cloud lab need a network of it")
    with pytest.raises(InvalidInput) as e:
        uc.create(networks=[{"network": "lab", "fixed_ip": "10.9.0.999"}])
    assert (e.value.where, e.value.message) == ("networks[0].fixed_ip", "not an IPv4 address: '10.9.0.999'")
    with uc.ctx.store.session() as s:
        assert s.scalars(select(Server)).all() == []
    assert uc.cloud.srvs == {} and uc.cloud.uploads == []
