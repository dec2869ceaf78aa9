"""The `openstack` node driver (provisioning/drivers/openstack.py) through the node service:
a Nova server of a known cloud as a node, its power and state Nova's, its inventory the
flavor's. Against the in-memory cloud of tests/openstack_support.py; the real Nova is in
tests/e2e/test_overcloud.py (test_quintupleo_...)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import own_store_url
from tests.openstack_support import FakeCloud
from tests.unit.test_nodes import act
from undercloud.errors import InvalidInput
from undercloud.provisioning.drivers import DriverError
from undercloud.provisioning.drivers import openstack as driver
from undercloud.provisioning.nodes import NodeService
from undercloud.store import Store

CONFIG = {"auth": {"auth_url": "http://127.0.0.1:5000/v3", "password": "pw"}}


def cloud_config(name: str) -> dict:
    """The clouds this process knows (what the service gives: Clouds.config): `lab` only."""
    if name != "lab":
        raise DriverError(f"no cloud {name!r}")
    return CONFIG


def nova_server() -> driver.OpenStackDriver:
    return driver.OpenStackDriver({"cloud": "lab", "server": "bm-0"}, cloud_config=cloud_config)


@pytest.fixture
def cloud(monkeypatch):
    c = FakeCloud()
    c._create_server("bm-0", "img", "f-1", [], {})
    monkeypatch.setattr(driver, "_connections", {("lab", json.dumps(CONFIG, sort_keys=True)): c})
    return c


@pytest.fixture
def svc(tmp_path):
    s = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=2, cloud_config=cloud_config)
    yield s
    s.close()


def enrol(svc, **entry) -> str:
    node = {"name": "bm-0", "pm_type": "openstack", "cloud": "lab", "server": "bm-0", **entry}
    return svc.import_nodes(json.dumps({"nodes": [node]}))[0]["uuid"]


def test_a_nova_server_managed_inspected_and_powered_as_a_node(svc, cloud):
    (srv,) = cloud.srvs.values()
    cloud.boot(srv)
    enrol(svc)
    assert svc.get("bm-0")["driver_info"] == {"cloud": "lab", "server": "bm-0"}
    managed = act(svc, "bm-0", "manage")
    assert (managed["provision_state"], managed["power_state"]) == ("manageable", "on")
    inspected = act(svc, "bm-0", "inspect")
    assert inspected["provision_state"] == "manageable", inspected["last_error"]
    props = inspected["properties"]
    assert (props["cpus"], props["memory_mb"], props["local_gb"], props["cpu_arch"]) == (1, 1024, 10, "x86_64")
    assert inspected["ports"] == ["fa:16:3e:00:00:01"]
    provided = act(svc, "bm-0", "provide")  # cleaning: powered off
    assert (provided["provision_state"], provided["power_state"], srv.status) == ("available", "off", "SHUTOFF")
    assert svc.set_power("bm-0", "reboot")["power_state"] == "on"
    assert svc.set_power("bm-0", "reboot")["power_state"] == "on"
    assert svc.set_power("bm-0", "off")["power_state"] == "off"
    assert cloud.actions == [("bm-0", "stop"), ("bm-0", "start"), ("bm-0", "reboot HARD"), ("bm-0", "stop")]


def test_what_nova_refuses_or_lacks_is_one_line(svc, cloud):
    enrol(svc, name="gone", server="no-such-server")
    failed = act(svc, "gone", "manage")
    assert failed["provision_state"] == "enroll"
    assert failed["last_error"].endswith("cloud lab server no-such-server: no such server in the cloud")
    (srv,) = cloud.srvs.values()
    enrol(svc)  # bm-0 is BUILD: no power state to report
    assert act(svc, "bm-0", "manage")["last_error"].endswith("cloud lab server bm-0 is BUILD (spawning)")
    cloud.boot(srv)
    assert act(svc, "bm-0", "manage")["provision_state"] == "manageable"
    cloud.fail["stop"] = RuntimeError("ConflictException: 409: Cannot 'stop' instance while it is in vm_state error")
    with pytest.raises(DriverError) as e:
        svc.set_power("bm-0", "off")
    assert str(e.value) == ("cloud lab server bm-0: stop: ConflictException: 409: Cannot 'stop' instance while "
                            "it is in vm_state error")
    with pytest.raises(DriverError, match="no network boot here"):
        svc.set_boot_device("bm-0", "pxe")
    with pytest.raises(DriverError, match="boots from cd once only"):
        svc.set_boot_device("bm-0", "cd", persistent=True)


def test_the_cloud_comes_from_whoever_makes_the_driver(svc, cloud):
    """No module-wide setting: the service makes its nodes' drivers with its clouds; a driver
    made without them knows no cloud."""
    (srv,) = cloud.srvs.values()
    cloud.boot(srv)
    enrol(svc)
    made = svc.driver(svc.record("bm-0"))
    assert made.cloud_config is cloud_config and made.power.get() == "on"
    with pytest.raises(DriverError, match="cloud lab server bm-0: this process knows no clouds"):
        driver.OpenStackDriver({"cloud": "lab", "server": "bm-0"}).power.get()
    shown = svc.get("bm-0")
    assert shown["boot_interface"] == "virtual-media"  # Nova rescue: its only one
    assert {k: shown[k] for k in ("power_interface", "management_interface", "media_interface")} == {
        "power_interface": "nova", "management_interface": "nova", "media_interface": "nova-rescue"}
    # this node service has no ramdisk (BootDiskDeploy): the disk is booted, the flavor read
    assert (shown["deploy_interface"], shown["inspect_interface"]) == ("boot-disk", "bmc")


def test_instackenv_entries_name_their_cloud_and_server(svc):
    with pytest.raises(InvalidInput) as e:
        svc.import_nodes(json.dumps({"nodes": [{"name": "x", "pm_type": "openstack", "cloud": "lab"}]}))
    assert "server: required for pm_type openstack" in e.value.message
    two = [{"name": f"n{i}", "pm_type": "openstack", "cloud": "lab", "server": "same"} for i in range(2)]
    with pytest.raises(InvalidInput, match="same BMC"):
        svc.import_nodes(json.dumps({"nodes": two}))


def test_virtual_media_is_nova_rescue_with_the_iso_as_a_cd(cloud, tmp_path, monkeypatch):
    """Insert uploads the ISO as a rescue image; a one-time boot from cd powers on as rescue
    (status RESCUE: on); eject deletes the image and leaves the server running; the next
    reboot (or power off) ends the rescue, so the server boots its own disk."""
    from undercloud.provisioning.servers import baremetal_media

    (srv,) = cloud.srvs.values()
    cloud.boot(srv)
    d = nova_server()
    iso = tmp_path / "deploy.iso"
    iso.write_bytes(b"ISO 9660 stand-in" * 100)
    d.power.set("off")
    with baremetal_media.serve_file(iso) as url:
        d.media.insert(url)
    (upload,) = cloud.uploads
    assert (upload["disk_format"], upload["hw_rescue_device"], upload["bytes"]) == ("iso", "cdrom", iso.read_bytes())
    (image,) = cloud.imgs.values()
    d.management.set_boot_device("cd")
    d.power.set("on")
    assert (srv.status, d.power.get()) == ("RESCUE", "on")
    assert srv.metadata == {driver.MEDIA_KEY: image.id}  # the boot from cd was once
    d.media.eject()  # Nova takes no metadata from a rescued server: the key outlives its image
    assert (cloud.imgs, srv.metadata, srv.status) == ({}, {driver.MEDIA_KEY: image.id}, "RESCUE")
    d.management.set_boot_device("disk", persistent=True)
    d.power.set("reboot")
    assert (srv.status, srv.metadata) == ("ACTIVE", {})
    assert [a for _n, a in cloud.actions] == ["stop", f"rescue {image.id}", "unrescue"]
    # Rescued again, then powered off: unrescue, then stop.
    with baremetal_media.serve_file(iso) as url:
        d.media.insert(url)
    (second,) = cloud.imgs
    d.management.set_boot_device("cd")
    d.power.set("reboot")  # an ACTIVE server rebooted to its cd: rescued
    assert srv.status == "RESCUE"
    d.power.set("off")
    assert srv.status == "SHUTOFF" and [a for _n, a in cloud.actions][-3:] == [f"rescue {second}", "unrescue", "stop"]
    d.media.eject()  # nothing is left in Glance
    assert cloud.imgs == {} and srv.metadata == {}


def test_booting_the_cd_without_media_and_a_bad_media_url_are_one_line(cloud, tmp_path):
    (srv,) = cloud.srvs.values()
    cloud.boot(srv)
    d = nova_server()
    d.management.set_boot_device("cd")
    with pytest.raises(DriverError, match="^cloud lab server bm-0: boot from cd asked, but no media is inserted$"):
        d.power.set("reboot")
    with pytest.raises(DriverError, match="^cloud lab server bm-0: cannot read the media to upload: ") as e:
        d.media.insert("http://127.0.0.1:9/secret-path/deploy.iso")
    assert "secret-path" not in str(e.value)
    assert cloud.uploads == [] and srv.status == "ACTIVE"


def test_the_ramdisk_network_is_the_servers_port_and_this_hosts_route_there(cloud, monkeypatch):
    (srv,) = cloud.srvs.values()
    cloud.boot(srv)
    routes = []
    monkeypatch.setattr(driver, "route_source", lambda a: routes.append(a) or "10.9.0.1")
    net = nova_server().management.network()
    assert net == {"mac": "fa:16:3e:00:00:01", "address": "10.9.0.201", "prefix": 24, "undercloud": "10.9.0.1"}
    assert routes == ["10.9.0.201"]
