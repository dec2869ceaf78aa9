"""`lab up --cloud` (provisioning/cloud_lab.py): empty servers of a cloud to enrol as nodes,
against the in-memory cloud of tests/openstack_support.py (the real Nova: the e2e)."""

from __future__ import annotations

import json

import pytest

from tests.openstack_support import FakeCloud
from undercloud.errors import InvalidInput
from undercloud.provisioning import cloud_lab
from undercloud.provisioning.cloud_lab import CloudLab, CloudLabError

CONFIG = {"auth": {"auth_url": "http://127.0.0.1:5000/v3"}}


@pytest.fixture
def lab(monkeypatch):
    cloud = FakeCloud()
    monkeypatch.setattr(cloud_lab, "connect", lambda name, config: cloud)
    monkeypatch.setattr(cloud_lab, "POLL", 0.01)
    clouds = type("Clouds", (), {"config": staticmethod(lambda name: CONFIG)})()
    return CloudLab(clouds, "uc1234"), cloud


def test_up_makes_what_is_missing_and_down_removes_what_up_made(lab):
    lab, cloud = lab
    out = lab.up("host", 2)
    assert out["made"] == ["flavor uc1234-lab", "network uc1234-lab", "image uc1234-lab-empty",
                           "server uc1234-lab-0", "server uc1234-lab-1"]
    assert (cloud.flavors["uc1234-lab"].vcpus, cloud.flavors["uc1234-lab"].ram) == (1, 2048)
    assert [(s["name"], s["enable_dhcp"]) for s in cloud.subnets] == [("uc1234-lab", False)]
    nodes = out["instackenv"]["nodes"]
    assert [(n["name"], n["pm_type"], n["cloud"], n["memory"], n["ports"]) for n in nodes] == [
        (f"uc1234-lab-{i}", "openstack", "host", 2048, [{"address": "fa:16:3e:00:00:01"}]) for i in range(2)]
    assert {n["server"] for n in nodes} == set(cloud.srvs)
    assert lab.up("host", 2)["made"] == []  # again: nothing new
    assert lab.up("host", 3)["made"] == ["server uc1234-lab-2"]
    cloud._create_server("someone-else", "i", "f-1", [], {})  # not the lab's: stays
    assert sorted(lab.down("host")) == sorted(["server uc1234-lab-0", "server uc1234-lab-1", "server uc1234-lab-2",
                                               "flavor uc1234-lab", "network uc1234-lab", "image uc1234-lab-empty"])
    assert [s.name for s in cloud.srvs.values()] == ["someone-else"]
    assert set(cloud.flavors) == {"m1.small"} and set(cloud.nets) == {"lab"} and cloud.imgs == {}
    assert lab.down("host") == []


def test_what_it_is_told_to_use_must_exist_and_is_never_removed(lab):
    lab, cloud = lab
    with pytest.raises(CloudLabError, match="cloud host has no flavor 'm9.huge'"):
        lab.up("host", 1, flavor="m9.huge")
    with pytest.raises(CloudLabError, match="cloud host has no network 'nowhere'"):
        lab.up("host", 1, network="nowhere")
    assert cloud.srvs == {} and set(cloud.flavors) == {"m1.small"} and set(cloud.nets) == {"lab"}
    with pytest.raises(InvalidInput):
        lab.up("host", 0)
    out = lab.up("host", 1, flavor="m1.small", network="lab")
    assert out["made"] == ["image uc1234-lab-empty", "server uc1234-lab-0"]
    (srv,) = cloud.srvs.values()
    assert srv.flavor_id == "f-1" and srv.networks == [{"uuid": "net-1"}]
    lab.down("host")
    assert set(cloud.flavors) == {"m1.small"} and set(cloud.nets) == {"lab"}
    json.dumps(out)  # the API returns it as it is


def test_a_server_that_fails_to_build_is_one_line(lab, monkeypatch):
    lab, cloud = lab

    def broken(ref):
        srv = cloud.srvs[ref]
        srv.status, srv.fault = "ERROR", {"message": "No valid host was found."}
        return srv
    monkeypatch.setattr(cloud.compute, "get_server", broken)
    with pytest.raises(CloudLabError) as e:
        lab.up("host", 1)
    assert e.value.message == "cloud host: server uc1234-lab-0 is ERROR: No valid host was found."
