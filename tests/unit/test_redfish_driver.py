"""The redfish driver's handling of a BMC that refuses a power action (no BMC needed)."""

from __future__ import annotations

import pytest

sushy = pytest.importorskip("sushy")

from undercloud.provisioning.drivers import DriverError  # noqa: E402
from undercloud.provisioning.drivers.redfish import RedfishDriver  # noqa: E402


class System:
    """A Redfish system whose BMC refuses every reset, reporting `state` afterwards."""

    def __init__(self, state):
        self.power_state = state
        self.resets = []

    def refresh(self, force=False):
        pass

    def reset_system(self, reset):
        self.resets.append(reset)
        raise sushy.exceptions.SushyError("Requested operation is not valid: domain is not running")


def driver(system):
    d = RedfishDriver({"address": "http://127.0.0.1:1", "system_id": "/redfish/v1/Systems/x",
                       "username": "u", "password": "p"})
    d._system = system
    return d


def test_power_off_refused_but_already_off_is_done():
    system = System(sushy.PowerState.OFF)
    driver(system).power.set("off")  # the machine went off by itself: the asked state holds
    assert system.resets == [sushy.ResetType.FORCE_OFF]


def test_power_off_refused_and_still_on_is_an_error():
    with pytest.raises(DriverError, match="power off: Requested operation is not valid"):
        driver(System(sushy.PowerState.ON)).power.set("off")


def test_reboot_refused_is_always_an_error():
    with pytest.raises(DriverError, match="power reboot"):
        driver(System(sushy.PowerState.ON)).power.set("reboot")
