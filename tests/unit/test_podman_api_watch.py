"""ApiWatch's decisions (host/podman.py) and the kube hook's side of them (agent/netns.py),
on real Unix sockets standing in for the podman API service: one that answers pings, one
that accepts and never answers (wedged), none (dead). The real service, broken and
restarted under a deploy step, is tests/integration/test_podman_api_watch.py."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from undercloud.agent import engine, libpod, netns, pod_spec
from undercloud.host import podman as hp


class FakeService:
    """A Unix socket server: `ok` answers `_ping` with 200, else it accepts and says nothing."""

    def __init__(self, path, ok=True):
        self.path, self.ok, self.conns = path, ok, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(16)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.ok:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK")
                conn.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def sock(tmp_path):
    return tmp_path / "podman.sock"


@pytest.fixture
def restarts(monkeypatch, sock):
    """restart_api_service without podman: the wedged or dead service is replaced by a good one."""
    done = []

    def restart(path, timeout=30):
        for s in list(services):
            s.close()
            services.remove(s)
        services.append(FakeService(path))
        done.append(path)
        return [4242]
    services: list[FakeService] = []
    monkeypatch.setattr(hp, "restart_api_service", restart)
    monkeypatch.setattr(hp, "PING_TIMEOUT", 0.3)
    yield done, services
    for s in services:
        s.close()


def test_a_dead_service_is_restarted_at_the_first_look(sock, restarts):
    done, _ = restarts
    watch = hp.ApiWatch(sock)
    assert watch.look().startswith("dead")
    assert done == [sock] and watch.status["restarts"] == 1
    assert watch.look() is None and watch.status["state"] == "ok" and done == [sock]


def test_a_wedged_service_is_restarted_after_three_silent_pings_not_one(sock, restarts):
    done, services = restarts
    services.append(FakeService(sock, ok=False))
    watch = hp.ApiWatch(sock)
    assert watch.look() is None and watch.look() is None and done == []  # late is not dead
    assert "no answer to a ping" in watch.look() and done == [sock]
    assert watch.look() is None and watch.unanswered == 0


def test_a_nodes_report_makes_one_silent_ping_enough_and_is_removed(sock, restarts):
    done, services = restarts
    services.append(FakeService(sock, ok=False))
    watch = hp.ApiWatch(sock)
    watch.reported.write_text(json.dumps({"error": "HTTP 500: error setting rlimit type 7", "image": None}))
    problem = watch.look()
    assert "no answer" in problem and "rlimit type 7" in watch.status["reason"] and done == [sock]
    assert not watch.reported.exists()


def test_a_report_runs_the_container_start_at_once_and_its_failure_restarts(sock, restarts, monkeypatch):
    done, services = restarts
    services.append(FakeService(sock))
    started = []
    monkeypatch.setattr(hp.ApiWatch, "canary", lambda self, image: started.append(image) or (
        "container start: HTTP 500: error setting rlimit type 7" if len(started) == 1 else None))
    watch = hp.ApiWatch(sock, image=lambda: "node-image")
    assert watch.look() is None and started == []  # healthy ping, no report, canary not due
    watch.reported.write_text(json.dumps({"error": "x", "image": "the-pods-image"}))
    assert "rlimit" in watch.look() and started == ["the-pods-image"] and done == [sock]
    watch.next_canary = 0  # due: the image comes from the watch's own source
    assert watch.look() is None and started == ["the-pods-image", "node-image"]


def test_still_bad_after_a_restart_is_said_once_and_not_restarted_in_a_loop(sock, restarts, monkeypatch, caplog):
    done, services = restarts
    monkeypatch.setattr(hp.ApiWatch, "canary", lambda self, image: "container start: HTTP 500: broken")
    watch = hp.ApiWatch(sock, image=lambda: "img", log=logging.getLogger("t.watch"))
    with caplog.at_level(logging.WARNING, logger="t.watch"):
        for _ in range(4):
            watch.next_canary = 0
            watch.look()
    assert done == [sock]  # within RESTART_GAP: one restart
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("restarted" in m for m in msgs) == 1 and sum("still bad" in m for m in msgs) == 1, msgs
    assert watch.status["state"] == "failing" and watch.summary().startswith("podman API FAILING: container start")


def test_the_kube_hook_waits_for_the_check_then_plays_again(sock, monkeypatch):
    service = FakeService(sock)
    try:
        monkeypatch.setenv("CONTAINER_HOST", f"unix://{sock}")
        monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", "container:node")
        pod = {"spec": {"containers": [{"name": "c", "image": "img:1"}]}}
        report = sock.with_name(sock.name + engine.API_FAILED_SUFFIX)

        def watcher():  # the undercloud: sees the report, checks, removes it
            while not report.exists():
                time.sleep(0.05)
            seen.update(json.loads(report.read_text()))
            report.unlink()
        seen: dict = {}
        t = threading.Thread(target=watcher)
        t.start()
        assert netns.api_recovered(pod_spec.EngineFailure("HTTP 500: boom"), pod, wait=30)
        t.join(5)
        assert seen["image"] == "img:1" and "boom" in seen["error"]
        # nobody watching: no endless wait, and no report left behind
        assert not netns.api_recovered(ConnectionRefusedError(111, "refused"), pod, wait=1.5)
        assert not report.exists()
    finally:
        service.close()


def test_only_server_errors_count_as_engine_failures(sock):
    class Api(libpod.PodmanAPI):
        def call(self, method, path, body=None, raw=None, timeout=120, headers=None):
            return self.status, b'{"message": "m"}'
    api = Api(str(sock))
    api.status = 500
    with pytest.raises(pod_spec.EngineFailure):
        api.ok("POST", "/containers/x/start")
    api.status = 404
    with pytest.raises(pod_spec.PodError) as e:
        api.ok("POST", "/containers/x/start")
    assert not isinstance(e.value, pod_spec.EngineFailure)
