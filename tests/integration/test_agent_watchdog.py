"""Self-healing on real podman: the agent's watchdog starts a container stopped by hand and
restarts one whose health check keeps failing (a process stopped with SIGSTOP), says why,
and counts it; a re-run of the kube hook with an unchanged config repairs what drifted
and reports it; `watchdog.pause` leaves a stopped service stopped. Both ways Pods run:
the node's own podman (VM and bare-metal nodes) and the host's podman API in a container
node's namespaces."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from pathlib import Path

from tests.integration.test_agent_kube import IMAGE, container_node, image, pod, podman  # noqa: F401 - fixtures
from tests.unit.agent_support import deployment, free_port
from undercloud.agent import hooks, watchdog


def rounds_until(dog: watchdog.Watchdog, done, limit: int = 30, pause: float = 1.0) -> list[str]:
    """Watchdog rounds until `done()` (at most `limit`); what they repaired."""
    did: list[str] = []
    for _ in range(limit):
        did += dog.round()
        if done():
            return did
        time.sleep(pause)
    raise AssertionError(f"not done after {limit} rounds; the watchdog did: {did}")


def state_of(name: str) -> str:
    return podman("inspect", name, "--format", "{{.State.Status}}").stdout.strip()


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def logged():
    """(the lines logged, the log function)"""
    lines: list[str] = []
    return lines, lines.append


def test_podman_mode_stopped_hung_and_drifted_pods_come_back(image, tmp_path, monkeypatch):  # noqa: F811
    name = f"uc-watchdog-{uuid.uuid4().hex[:8]}"
    port = free_port()
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.html").write_text("up\n")
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", str(state))
    spec = pod(name, port, str(www), "a")
    spec["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = 1
    opts = {"kube_mode": "podman", "ready_timeout": 60}
    container = f"{name}-web"
    reports: list[dict] = []
    lines, log = logged()
    try:
        r = hooks.run(deployment("w1", "web", "kube", spec, options=opts), None, 300, dict(os.environ))
        assert r["deploy_status_code"] == 0, r
        dog = watchdog.Watchdog(log, report=reports.append)
        assert dog.round() == [] and answers(port)
        health = json.loads((state / "kube" / "health.json").read_text())
        web = health["pods"][name]["containers"]["web"]
        assert web["state"] == "running" and web["restarts"] == 0 and web["image"].endswith(IMAGE.split("/")[-1])
        assert len(health["pods"][name]["config"]) == 12
        assert reports and reports[-1]["pods"][name]["containers"]["web"]["state"] == "running"

        # Stopped by hand: started again (after a second look: exits are the restart policy's).
        assert podman("stop", "-t", "1", container).returncode == 0
        did = rounds_until(dog, lambda: state_of(container) == "running")
        assert did == [f"pod {name}: container web was exited: started"], did
        assert any("watchdog: pod" in x and "was exited: started" in x for x in lines)

        # Hung (SIGSTOP of its main process): its check times out 3 times, then it is killed and started.
        rounds_until(dog, lambda: answers(port))
        dog.round()  # the check passes once since this start: from now on failures count
        pid = int(podman("inspect", container, "--format", "{{.State.Pid}}").stdout)
        os.kill(pid, signal.SIGSTOP)
        assert not answers(port)
        started = time.monotonic()
        did = rounds_until(dog, lambda: answers(port), limit=40)
        assert did == [f"pod {name}: container web health check (HTTP GET :{port}/index.html) failed 3 times "
                       f"in a row: restarted"], (did, lines)
        print(f"hung container back and answering in {time.monotonic() - started:.1f} s")
        health = json.loads((state / "kube" / "health.json").read_text())
        web = health["pods"][name]["containers"]["web"]
        assert web["restarts"] == 2 and web["agent_restarts"] == 2
        assert web["last_restart"]["why"].startswith("health check (HTTP GET") and reports[-1] == health

        # Paused: a service stopped for maintenance stays stopped.
        (state / "kube" / "watchdog.pause").touch()
        assert podman("stop", "-t", "1", container).returncode == 0
        assert dog.round() == [] and dog.round() == [] and state_of(container) == "exited"
        assert json.loads((state / "kube" / "health.json").read_text())["paused"] is True
        (state / "kube" / "watchdog.pause").unlink()

        # The hook run again with the same config repairs the drift and says so.
        again = hooks.run(deployment("w2", "web", "kube", spec, options=opts), None, 300, dict(os.environ))
        assert again["deploy_status_code"] == 0, again
        assert again["pod_action"] == "started" and again["repairs"] == [f"{name}: was exited, started, healthy"]
        assert answers(port)
        podman("rm", "-f", "-t", "0", container)
        third = hooks.run(deployment("w3", "web", "kube", spec, options=opts), None, 300, dict(os.environ))
        assert third["deploy_status_code"] == 0, third
        assert third["repairs"] == [f"{name}: was missing containers, re-created, healthy"]
        healthy = hooks.run(deployment("w4", "web", "kube", spec, options=opts), None, 300, dict(os.environ))
        assert healthy["pod_action"] == "unchanged" and healthy["repairs"] == []
    finally:
        podman("pod", "rm", "-f", name)


def test_netns_mode_watchdog_through_the_podman_api(container_node, monkeypatch):  # noqa: F811
    node, env = container_node
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", env["UNDERCLOUD_AGENT_STATE"])
    alive = "/tmp/alive"
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "svc"}, "spec": {"containers": [{
        "name": "main", "image": IMAGE, "command": ["sh", "-c", f"mkdir -p /tmp; touch {alive}; exec sleep 600"],
        "readinessProbe": {"exec": {"command": ["test", "-e", alive]}, "periodSeconds": 1},
        # An exec readiness probe restarts nothing; a livenessProbe does.
        "livenessProbe": {"exec": {"command": ["test", "-e", alive]}, "periodSeconds": 1}}]}}
    r = hooks.run(deployment("n1", "svc", "kube", {"kind": "List", "items": [p]}, options={"ready_timeout": 60}),
                  None, 300, env)
    assert r["deploy_status_code"] == 0, r
    container = f"{node}-svc-main"
    lines, log = logged()
    dog = watchdog.Watchdog(log)
    assert dog.round() == []

    assert podman("stop", "-t", "1", container).returncode == 0
    did = rounds_until(dog, lambda: state_of(container) == "running")
    assert did == ["pod svc: container main was exited: started"], did

    # Its liveness check fails (the file it checks is gone): restarted, and the check passes again.
    rounds_until(dog, lambda: podman("exec", container, "test", "-e", alive).returncode == 0)
    dog.round()
    assert podman("exec", container, "busybox", "rm", alive).returncode == 0
    did = rounds_until(dog, lambda: bool(dog.track) and podman("exec", container, "test", "-e", alive).returncode == 0
                       and state_of(container) == "running", limit=40)
    assert did == ["pod svc: container main health check (exec test -e /tmp/alive) failed 3 times in a row: "
                   "restarted"], did
    health = json.loads((Path(env["UNDERCLOUD_AGENT_STATE"]) / "kube" / "health.json").read_text())
    assert health["pods"]["svc"]["containers"]["main"]["agent_restarts"] == 2
    assert health["pods"]["svc"]["mode"] == "netns"
