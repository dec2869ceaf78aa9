"""The podman API service watched like a service (host/podman.py's ApiWatch): broken while
a container node's deploy step drives it (killed, wedged, or failing every container start
as it once did: "error setting rlimit type 7"), it is restarted, said once in the log and in
the watch's status, and the step passes. Each test runs its own API service on a socket of
its own, so the host's service (/run/podman/podman.sock) and other podman users are not
touched; nothing is left running."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid

import pytest

from tests.integration.test_agent_kube import IMAGE, image  # noqa: F401 - the busybox image fixture
from tests.unit.agent_support import deployment
from undercloud.agent import hooks

pytestmark = pytest.mark.integration


def podman(*args, **kw):
    from undercloud.host import podman as hp
    return hp.podman(*args, check=False, **kw)


@pytest.fixture
def api(image, tmp_path):  # noqa: F811 - the fixture imported above
    """An API service on a socket of this test's own, stopped at the end."""
    if os.geteuid() != 0:
        pytest.skip("a podman API service and container nodes need root")
    from undercloud.host import podman as hp
    sock = tmp_path / "podman.sock"
    hp.api_service(sock, timeout=60)
    yield sock
    for pid in hp._services(sock):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)
    for c in podman("ps", "-aq", "--filter", "label=undercloud.canary").stdout.split():
        podman("rm", "-f", "-t", "0", c)


@pytest.fixture
def node(api, tmp_path, monkeypatch):
    """A container node whose kube hook drives the API service on `api` (netns mode)."""
    name = f"uc-watch-node-{uuid.uuid4().hex[:6]}"
    podman("run", "-d", "--name", name, "--hostname", name, "--network", "none", IMAGE, "sleep", "600", timeout=120)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{api}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", f"container:{name}")
    state = tmp_path / "state"
    state.mkdir()
    yield name, dict(os.environ, UNDERCLOUD_AGENT_STATE=str(state))
    monkeypatch.delenv("CONTAINER_HOST")  # the clean-up is this host's podman, not the API under test
    for c in podman("ps", "-a", "--filter", f"label=undercloud.node={name}", "--format", "{{.Names}}").stdout.split():
        podman("rm", "-f", "-t", "0", c)
    podman("rm", "-f", "-t", "0", name)


def step(n: int) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"web{n}"}, "spec": {"containers": [
        {"name": "c", "image": IMAGE, "command": ["sleep", "600"],
         "readinessProbe": {"exec": {"command": ["test", "-e", "/bin/sh"]}, "periodSeconds": 1}}]}}
    return deployment(f"step{n}", f"web{n}", "kube", {"kind": "List", "items": [pod]}, options={"ready_timeout": 60})


def watching(watch, stop: threading.Event) -> threading.Thread:
    """The service's servers loop, faster: a look every second."""
    def loop():
        while not stop.wait(1):
            watch.look()
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def run_step_while_watched(watch, n: int, env: dict) -> dict:
    stop = threading.Event()
    t = watching(watch, stop)
    try:
        return hooks.run(step(n), None, 300, env)
    finally:
        stop.set()
        t.join(30)


def services(sock) -> list[int]:
    from undercloud.host import podman as hp
    return hp._services(sock)


def test_a_healthy_service_is_left_alone_and_its_check_leaves_nothing(api, caplog):
    from undercloud.host import podman as hp
    watch = hp.ApiWatch(api, image=lambda: IMAGE)
    (pid,) = services(api)
    watch.next_canary = 0  # its container start now, not in ten minutes
    assert watch.look() is None and watch.look() is None
    assert services(api) == [pid] and watch.status == {"socket": str(api), "state": "ok", "restarts": 0}
    assert watch.summary() == "podman API ok"
    assert podman("ps", "-aq", "--filter", "label=undercloud.canary").stdout.strip() == ""


@pytest.mark.parametrize("how", ["killed", "wedged"])
def test_a_broken_service_during_a_deploy_step_is_restarted_and_the_step_passes(node, api, how, caplog):
    from undercloud.host import podman as hp
    name, env = node
    watch = hp.ApiWatch(api, image=lambda: IMAGE, log=logging.getLogger("test.watch"))
    r = run_step_while_watched(watch, 1, env)
    assert r["deploy_status_code"] == 0, r
    (old,) = services(api)
    os.kill(old, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    with caplog.at_level(logging.WARNING, logger="test.watch"):
        r = run_step_while_watched(watch, 2, env)
    assert r["deploy_status_code"] == 0, r
    assert f"in the network namespace of {name}" in r["deploy_stdout"]
    (new,) = services(api)
    assert new != old and hp._ping(api) is None
    said = [rec.getMessage() for rec in caplog.records if "restarted" in rec.getMessage()]
    assert len(said) == 1, said  # once
    assert ("its process was gone" if how == "killed" else f"stopped pid {old}") in said[0], said
    # well again since (the looks after the restart), the restart still shown
    assert watch.status["state"] == "ok" and watch.status["restarts"] == 1
    assert watch.summary().startswith("podman API ok, restarted 1x (last ") and watch.status["reason"] in said[0]
    assert not watch.reported.exists()
    assert podman("inspect", f"{name}-web2-c", "--format", "{{.State.Status}}").stdout.strip() == "running"


def test_a_service_that_fails_every_container_start_is_restarted(node, api, tmp_path, caplog):
    """As it once failed: a service that answers pings but cannot set a container's nofile
    limit (here: started with a lower hard limit and without CAP_SYS_RESOURCE)."""
    from undercloud.host import podman as hp
    if not shutil.which("capsh") or not shutil.which("prlimit"):
        pytest.skip("capsh (libcap2-bin) and prlimit (util-linux) make the broken service")
    name, env = node
    for pid in services(api):
        os.kill(pid, signal.SIGKILL)
    api.unlink()
    local = {k: v for k, v in hp.env().items() if k != "CONTAINER_HOST"}  # a service, not a client
    bad = subprocess.Popen(["prlimit", "--nofile=1024:1024", "capsh", "--drop=cap_sys_resource", "--",
                            "-c", f"exec podman system service --time=0 unix://{api}"], env=local, cwd="/",
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while hp._ping(api) is not None:
            assert time.monotonic() < deadline and bad.poll() is None, "the broken service did not start"
            time.sleep(0.2)
        watch = hp.ApiWatch(api, image=lambda: IMAGE, log=logging.getLogger("test.watch"))
        broken = watch.canary(IMAGE)
        if broken is None:
            pytest.skip("this host lets the service set the limit anyway: it cannot be broken this way here")
        assert "rlimit" in broken, broken
        with caplog.at_level(logging.WARNING, logger="test.watch"):
            r = run_step_while_watched(watch, 3, env)
        assert r["deploy_status_code"] == 0, r
        assert "played again after the undercloud's check" in r["deploy_stderr"]
        assert bad.wait(15) is not None and watch.status["restarts"] == 1
        said = [rec.getMessage() for rec in caplog.records if "restarted" in rec.getMessage()]
        assert len(said) == 1 and "rlimit" in said[0], said
    finally:
        if bad.poll() is None:
            bad.kill()
            bad.wait()
