"""`undercloud deploy` on a stack whose nodes stopped: the stopped ones are powered on before the
steps run again; one whose machine is gone is refused at once, naming `overcloud replace`."""

from __future__ import annotations

import pytest

from undercloud.cli.deploy import power_on_stopped
from undercloud.errors import Conflict, NotFound, UndercloudError


class Servers:
    """The servers API as the deploy sees it: status by name; power-on of a gone machine refused."""

    def __init__(self, statuses: dict[str, str], gone: tuple = (), busy: tuple = ()):
        self.statuses, self.gone, self.busy, self.powered = statuses, gone, busy, []

    def get(self, path: str):
        name = path.rsplit("/", 1)[1]
        if name not in self.statuses:
            raise NotFound(f"no server {name}", "server")
        return {"name": name, "status": self.statuses[name]}

    def post(self, path: str, json: dict):
        name = path.split("/")[3]
        assert json == {"action": "power-on"}
        if name in self.gone:
            raise Conflict(f"server {name}: the machine is gone; `undercloud server rebuild {name}` makes it again",
                           "server")
        if name in self.busy:
            raise Conflict(f"server {name} is busy", "server")
        self.statuses[name] = "ACTIVE"
        self.powered.append(name)


def drift(*nodes: str) -> list[dict]:
    return [{"node": n, "service": s, "health": "failing (timed out)"} for n in nodes for s in ("mysql", "haproxy")]


def test_only_stopped_nodes_of_drifted_services_are_powered_on(capsys):
    api = Servers({"c-0": "SHUTOFF", "c-1": "ERROR", "c-2": "ACTIVE", "c-3": "SHUTOFF"})
    power_on_stopped(api, drift("c-0", "c-1", "c-2", "unknown"))
    assert api.powered == ["c-0", "c-1"]  # c-3: no service of it drifted; unknown: no such server
    err = capsys.readouterr().err
    assert "repaired: node c-0 was SHUTOFF: powered on" in err and "repaired: node c-1 was ERROR: powered on" in err


def test_a_gone_machine_is_refused_naming_overcloud_replace_and_a_refusal_is_said():
    api = Servers({"c-0": "SHUTOFF", "c-1": "ERROR"}, gone=("c-1",))
    with pytest.raises(UndercloudError) as exc:
        power_on_stopped(api, drift("c-0", "c-1"))
    assert str(exc.value) == ("deploy: node c-1: the machine is gone; `undercloud overcloud replace c-1` "
                              "makes it again")
    assert api.powered == ["c-0"]


def test_a_power_on_refused_for_another_reason_is_said_and_the_deploy_goes_on(capsys):
    api = Servers({"c-0": "ERROR", "c-1": "SHUTOFF"}, busy=("c-0",))
    power_on_stopped(api, drift("c-0", "c-1"))
    assert api.powered == ["c-1"]
    assert "node c-0 is ERROR and was not powered on: server c-0 is busy" in capsys.readouterr().err
