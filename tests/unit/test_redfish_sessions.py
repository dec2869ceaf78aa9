"""Redfish nodes behind one BMC share its session in a batch (issue 42): counted at a real
Redfish BMC, sushy-tools' emulator with its in-memory systems, served here on loopback."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("sushy")
pytest.importorskip("sushy_tools")

from tests.conftest import own_store_url  # noqa: E402
from undercloud.provisioning import states  # noqa: E402
from undercloud.provisioning.nodes import NodeService  # noqa: E402
from undercloud.store import Store  # noqa: E402

SYSTEMS = [f"8b2f1a3c-0000-4000-8000-00000000000{i}" for i in range(4)]


@pytest.fixture(scope="module")
def bmc(tmp_path_factory):
    """The emulator, and what it saw: each request's (client port, method, path). A sushy
    client (our session with a BMC: its HTTP session, basic auth) starts with GET /redfish/v1."""
    from sushy_tools.emulator import main as emulator
    from werkzeug.serving import make_server

    emulator.app.configure(extra_config={
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_STATE_DIR": str(tmp_path_factory.mktemp("sushy")),
        "SUSHY_EMULATOR_FAKE_SYSTEMS": [
            {"uuid": u, "name": f"sys{i}", "power_state": "Off", "nics": [{"mac": f"52:54:00:33:00:0{i}"}]}
            for i, u in enumerate(SYSTEMS)],
    })
    seen: list[tuple[int, str, str]] = []
    app = emulator.app.wsgi_app

    def counting(environ, start_response):
        seen.append((int(environ["REMOTE_PORT"]), environ["REQUEST_METHOD"], environ["PATH_INFO"].rstrip("/")))
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, counting, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()
    thread.join(10)


def settle(svc: NodeService, names: list[str]) -> dict[str, dict]:
    deadline = time.monotonic() + 60
    while True:
        got = {n["name"]: n for n in svc.list() if n["name"] in names}
        if all(states.is_stable(n["provision_state"]) for n in got.values()):
            return got
        assert time.monotonic() < deadline, {k: v["provision_state"] for k, v in got.items()}
        time.sleep(0.05)


def test_systems_behind_one_bmc_share_its_session_in_a_batch(bmc, tmp_path):
    url, seen = bmc
    svc = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=4)
    try:
        svc.import_nodes(json.dumps({"nodes": [
            {"name": f"rf{i}", "pm_type": "redfish", "pm_addr": url, "pm_system_id": u, "pm_user": "admin",
             "pm_password": "pw"} for i, u in enumerate(SYSTEMS)]}))
        names = [f"rf{i}" for i in range(len(SYSTEMS))]

        seen.clear()
        svc.act_many(names, "manage")
        got = settle(svc, names)
        assert {n["provision_state"] for n in got.values()} == {"manageable"}
        assert {n["power_state"] for n in got.values()} == {"off"}
        roots = [s for s in seen if s[1:] == ("GET", "/redfish/v1")]
        systems = {s[2] for s in seen if s[2].startswith("/redfish/v1/Systems/")}
        assert len(roots) == 1  # one client for the BMC, not one per node
        assert systems == {f"/redfish/v1/Systems/{u}" for u in SYSTEMS}  # every system was read

        seen.clear()
        svc.act_many(names, "provide")  # cleaning powers every system off (its power changes later here)
        got = settle(svc, names)
        assert {n["provision_state"] for n in got.values()} == {"available"}
        assert {n["power_state"] for n in got.values()} == {"off"}
        assert len([s for s in seen if s[1:] == ("GET", "/redfish/v1")]) == 1
        assert len([s for s in seen if s[1] == "POST" and s[2].endswith("ComputerSystem.Reset")]) == len(SYSTEMS)

        # one request per node, one after the other: a client each
        seen.clear()
        for name in names:
            svc.act(name, "manage")
            svc.act(name, "provide")
            settle(svc, [name])
        assert len([s for s in seen if s[1:] == ("GET", "/redfish/v1")]) == len(SYSTEMS)
    finally:
        svc.close()


def test_a_missing_system_fails_its_node_only(bmc, tmp_path):
    url, seen = bmc
    svc = NodeService(Store(own_store_url(tmp_path / "uc.db")).create_schema(), workers=4)
    try:
        systems = [SYSTEMS[0], "no-such-system", SYSTEMS[1]]
        svc.import_nodes(json.dumps({"nodes": [
            {"name": f"m{i}", "pm_type": "redfish", "pm_addr": url, "pm_system_id": u, "pm_user": "admin",
             "pm_password": "pw"} for i, u in enumerate(systems)]}))
        seen.clear()
        svc.act_many(["m0", "m1", "m2"], "manage")
        got = settle(svc, ["m0", "m1", "m2"])
        assert got["m0"]["provision_state"] == got["m2"]["provision_state"] == "manageable"
        assert got["m1"]["provision_state"] == "enroll"
        assert got["m1"]["last_error"] == f"redfish BMC {url} has no system '/redfish/v1/Systems/no-such-system'"
        assert len([s for s in seen if s[1:] == ("GET", "/redfish/v1")]) == 1
    finally:
        svc.close()
