"""Changes pushed, not polled: the metadata long-poll against a real service (uvicorn on
loopback) — held, woken, timed out, let go when the client leaves, 401 when the token is
revoked while held, many at once, released when the service stops — and the agent's
fallback to polling when long-polls are not held (an older undercloud) or cut (a proxy)."""

from __future__ import annotations

import http.client
import io
import json
import os
import select
import socket
import socketserver
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.unit.agent_support import LiveService, deployment, settings, wait_for
from undercloud.agent import runner
from undercloud.agent.logs import Log
from undercloud.agent.runner import Agent


@pytest.fixture
def svc(tmp_path):
    s = LiveService(tmp_path / "uc", plain_agents=True).start()
    yield s
    s.stop()


def get(port: int, sid: str, token: str, etag: str | None = None, wait: float | None = None,
        timeout: float = 60) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"X-Server-Token": token, **({"If-None-Match": etag} if etag else {})}
        conn.request("GET", f"/v1/agent/servers/{sid}/metadata" + (f"?wait={wait:g}" if wait is not None else ""),
                     headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def etag_of(svc, sid: str, token: str) -> str:
    status, headers, _ = get(svc.port, sid, token)
    assert status == 200
    return headers["etag"]


# ---- the service ---------------------------------------------------------------------------
def test_held_poll_answers_304_after_its_wait_and_200_on_a_change(svc):
    tok = svc.meta.register("s1", "n1")
    etag = etag_of(svc, "s1", tok)
    t0 = time.monotonic()
    status, headers, body = get(svc.port, "s1", tok, etag, wait=0.6)
    assert status == 304 and body == b"" and headers["etag"] == etag
    assert time.monotonic() - t0 >= 0.5  # held for its wait, not answered at once
    assert svc.meta.waiting() == 0

    threading.Timer(0.3, lambda: svc.meta.put_deployment("s1", deployment("d1", "x", "script", "echo"))).start()
    status, headers, body = get(svc.port, "s1", tok, etag, wait=30)
    assert status == 200 and headers["etag"] != etag
    assert [d["id"] for d in json.loads(body)["deployments"]] == ["d1"]
    # An ETag that is not the current one is answered at once, whatever the wait.
    t0 = time.monotonic()
    assert get(svc.port, "s1", tok, etag, wait=30)[0] == 200
    assert time.monotonic() - t0 < 5


def test_many_waiters_each_woken_by_its_own_server_only(svc):
    servers = {f"s{i}": svc.meta.register(f"s{i}", f"n{i}") for i in range(20)}
    etags = {sid: etag_of(svc, sid, tok) for sid, tok in servers.items()}
    with ThreadPoolExecutor(max_workers=80) as pool:
        held = [(sid, pool.submit(get, svc.port, sid, tok, etags[sid], 40)) for sid, tok in servers.items()
                for _ in range(4)]
        wait_for(lambda: svc.meta.waiting() == 80, what="80 held long-polls")
        changed = [f"s{i}" for i in range(0, 20, 2)]
        for sid in changed:  # one change per even server, from this (non-loop) thread
            svc.meta.set_extra(sid, {"v": sid})
        for sid, fut in held:
            if sid in changed:
                status, _, body = fut.result(timeout=20)
                assert status == 200 and json.loads(body)["v"] == sid
        assert all(not fut.done() for sid, fut in held if sid not in changed)  # still held
        assert svc.meta.waiting() == 40
        for sid in servers:
            if sid not in changed:
                svc.meta.set_extra(sid, {"v": "later"})
        assert all(fut.result(timeout=20)[0] == 200 for _, fut in held)
    assert svc.meta.waiting() == 0  # nothing left behind


def test_a_client_that_leaves_while_held_is_let_go(svc):
    tok = svc.meta.register("s1", "n1")
    etag = etag_of(svc, "s1", tok)
    sock = socket.create_connection(("127.0.0.1", svc.port))
    sock.sendall(f"GET /v1/agent/servers/s1/metadata?wait=100 HTTP/1.1\r\nHost: x\r\nX-Server-Token: {tok}\r\n"
                 f"If-None-Match: {etag}\r\n\r\n".encode())
    wait_for(lambda: svc.meta.waiting() == 1, what="the long-poll to be held")
    sock.close()
    wait_for(lambda: svc.meta.waiting() == 0, timeout=10, what="the held poll let go when its client left")
    # and the service still answers its agent
    assert get(svc.port, "s1", tok, etag, wait=0.1)[0] == 304


def test_a_token_revoked_while_held_gets_401_at_once(svc):
    tok = svc.meta.register("s1", "n1")
    etag = etag_of(svc, "s1", tok)
    with ThreadPoolExecutor(max_workers=2) as pool:
        fut = pool.submit(get, svc.port, "s1", tok, etag, 60)
        wait_for(lambda: svc.meta.waiting() == 1, what="the long-poll to be held")
        t0 = time.monotonic()
        svc.meta.revoke("s1")
        status, _, body = fut.result(timeout=20)
    assert status == 401 and json.loads(body)["error"] == "unknown server or wrong server token"
    assert time.monotonic() - t0 < 10
    assert tok not in body.decode()


def test_a_change_written_by_another_worker_wakes_the_held_poll_at_its_refresh(svc, tmp_path):
    other = LiveService(tmp_path / "uc", plain_agents=True).start()  # a second worker on the same store
    try:
        tok = svc.meta.register("s1", "n1")
        etag = etag_of(svc, "s1", tok)
        assert etag_of(other, "s1", tok) == etag
        with ThreadPoolExecutor(max_workers=1) as pool:
            fut = pool.submit(get, other.port, "s1", tok, etag, 60)
            wait_for(lambda: other.meta.waiting() == 1, what="the long-poll held by the other worker")
            svc.meta.put_deployment("s1", deployment("d1", "x", "script", "echo"))
            assert not fut.done()  # that worker learns of it at its next heartbeat ...
            assert other.meta.refresh() == 1  # ... which takes up the revisions that moved
            status, _, body = fut.result(timeout=20)
        assert status == 200 and [d["id"] for d in json.loads(body)["deployments"]] == ["d1"]
    finally:
        other.stop()


def test_bad_waits_are_refused_in_one_line(svc):
    tok = svc.meta.register("s1", "n1")
    etag = etag_of(svc, "s1", tok)
    for bad in ("soon", "nan", "inf"):
        conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=10)
        conn.request("GET", f"/v1/agent/servers/s1/metadata?wait={bad}",
                     headers={"X-Server-Token": tok, "If-None-Match": etag})
        r = conn.getresponse()
        body = json.loads(r.read())
        conn.close()
        assert r.status == 400 and body == {"error": f"wait: not a number: {bad!r}", "where": "query"}
    assert get(svc.port, "s1", "wrong", etag, wait=30)[0] == 401  # refused at once, never held
    assert svc.meta.waiting() == 0


def test_release_answers_held_polls_and_holds_no_more(svc):
    tok = svc.meta.register("s1", "n1")
    etag = etag_of(svc, "s1", tok)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futs = [pool.submit(get, svc.port, "s1", tok, etag, 60) for _ in range(3)]
        wait_for(lambda: svc.meta.waiting() == 3, what="3 held long-polls")
        svc.meta.release()
        assert [f.result(timeout=10)[0] for f in futs] == [304] * 3
    t0 = time.monotonic()
    assert get(svc.port, "s1", tok, etag, wait=60)[0] == 304
    assert time.monotonic() - t0 < 5


def test_a_stopping_service_does_not_wait_out_held_polls(uc_home):
    from undercloud import daemon
    from undercloud.api.context import Context

    ctx = Context(uc_home.ensure())
    ctx.server_metadata._url = lambda: "http://127.0.0.1"  # an agent configured before TLS: plain HTTP
    tok = ctx.server_metadata.register("s1", "n1")
    ctx.store.engine.dispose()
    daemon.start(uc_home)
    port = int(uc_home.file("port").read_text())
    etag = get(port, "s1", tok)[1]["etag"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(get, port, "s1", tok, etag, 100)
        time.sleep(1.0)  # held by now (a liveness margin, not what the test decides on)
        t0 = time.monotonic()
        assert daemon.stop(uc_home) is not None
        stopped = time.monotonic() - t0
        status = fut.result(timeout=30)[0]
    assert status == 304
    assert stopped < 20  # without the release: the poll's 100 s, then uvicorn's kill after 30


# ---- the agent's fallback ----------------------------------------------------------------------
class Proxy(socketserver.ThreadingTCPServer):
    """A loopback HTTP proxy in front of the service, one request per connection: `strip`
    drops `wait=` (an undercloud without long-polls); `cut` closes a long-poll's connection
    after that many seconds (a proxy that ends long requests)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: int, strip: bool = False, cut: float | None = None):
        self.upstream, self.strip, self.cut = upstream, strip, cut
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), _Relay)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Relay(socketserver.BaseRequestHandler):
    def handle(self):
        px: Proxy = self.server  # type: ignore[assignment]
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next((int(v) for k, _, v in (ln.partition(b":") for ln in lines[1:])
                       if k.strip().lower() == b"content-length"), 0)
        while len(rest) < length:
            rest += self.request.recv(65536)
        method, target, version = lines[0].split(b" ")
        px.requests.append(target.decode())
        long_poll = b"wait=" in target
        if px.strip and long_poll:
            path, _, query = target.partition(b"?")
            kept = [q for q in query.split(b"&") if not q.startswith(b"wait=")]
            target = path + (b"?" + b"&".join(kept) if kept else b"")
        lines[0] = b" ".join((method, target, version))
        up = socket.create_connection(("127.0.0.1", px.upstream))
        try:
            up.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + rest)
            deadline = time.monotonic() + px.cut if px.cut and long_poll and not px.strip else None
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return  # cut: the connection closes with no answer
                ready, _, _ = select.select([up], [], [], left)
                if not ready:
                    continue
                chunk = up.recv(65536)
                if not chunk:
                    return
                self.request.sendall(chunk)
        finally:
            up.close()


def agent_via(tmp_path, svc, url, **kw):
    token = svc.meta.register("s1", "n1")
    stream = io.StringIO()
    return Agent(settings(tmp_path / "s1", url, "s1", token, **kw), Log(stream)), token, stream


def rounds(n):
    it = iter(range(n))
    return lambda: next(it, None) is None


def test_an_undercloud_without_long_polls_is_polled_at_the_interval(tmp_path, svc, monkeypatch):
    px = Proxy(svc.port, strip=True)
    try:
        agent, token, stream = agent_via(tmp_path, svc, px.url, hold=20.0, interval=3.0, jitter=0.0)
        sleeps: list[float] = []
        monkeypatch.setattr(runner.time, "sleep", sleeps.append)  # the rounds' pauses, recorded
        t0 = time.monotonic()
        agent.run_forever(stop=rounds(6))
        assert time.monotonic() - t0 < 15  # nothing was held (a held one would take 20 s)
        log = stream.getvalue()
        assert log.count("long-polls are not held or are cut") == 1
        assert "polling every 3 s, trying the long-poll again in 10 min" in log
        # the first round fetched the document plainly (an agent's first round acts at once); then
        # three long-polls answered at once without a change: after them only plain polls, an
        # interval apart
        fetched = [r for r in px.requests if "/metadata" in r]
        assert len(fetched) == 6 and "wait=" not in fetched[0] and all("wait=20" in r for r in fetched[1:4])
        assert not any("wait=" in r for r in fetched[4:])
        assert sleeps[-3:] == [3.0] * 3 and all(s <= 0.05 for s in sleeps[:-3])
        assert token not in log
        # still works: a change is applied on the next plain poll
        svc.meta.put_deployment("s1", deployment("d1", "x", "script", "#!/bin/sh\necho hi\n"))
        agent.run_forever(stop=rounds(1))
        assert svc.meta.signal_of("d1")["deploy_stdout"] == "hi\n"
    finally:
        px.shutdown()
        px.server_close()


def test_long_polls_cut_by_a_proxy_fall_back_to_polling(tmp_path, svc, monkeypatch):
    px = Proxy(svc.port, cut=1.2)
    try:
        agent, _token, stream = agent_via(tmp_path, svc, px.url, hold=10.0, interval=3.0, jitter=0.0)
        monkeypatch.setattr(runner.time, "sleep", lambda s: None)
        agent.run_forever(stop=rounds(1))  # the first fetch: a 200 at once
        agent.run_forever(stop=rounds(6))  # cut, plain (works), three times over
        log = stream.getvalue()
        assert log.count("long-polls are not held or are cut") == 1
        fetched = [r for r in px.requests if "/metadata" in r][1:]
        assert ["wait=" in r for r in fetched] == [True, False] * 3
        assert agent.hold() == 0.0  # polling now
    finally:
        px.shutdown()
        px.server_close()


def test_one_dropped_long_poll_is_not_a_fallback():
    """A restart of the undercloud ends one held poll: the agent long-polls on."""
    agent = Agent.__new__(Agent)  # judge() needs only its state and settings
    agent.s = settings_only(hold=25.0)
    agent.log = Log(io.StringIO())
    agent.cuts, agent.probe, agent.plain_until, agent.changed = 0, False, 0.0, False
    agent.judge(25.0, False, 12.0)  # cut while held
    assert agent.hold() == 0.0       # the next poll is plain, to tell why
    agent.judge(0.0, True, 0.01)     # it works: one cut
    assert agent.cuts == 1 and agent.hold() == 25.0
    agent.judge(25.0, True, 25.0)    # held for its wait: all is well again
    assert agent.cuts == 0 and agent.hold() == 25.0
    agent.judge(25.0, False, 0.01)   # refused at once: the undercloud is away, not a cut
    assert agent.cuts == 0 and agent.hold() == 25.0
    agent.judge(25.0, False, 3.0)    # cut ...
    agent.judge(0.0, False, 0.01)    # ... and the plain poll fails too: the undercloud is away
    assert agent.cuts == 0 and agent.hold() == 25.0


def settings_only(**kw):
    from pathlib import Path

    from undercloud.agent.settings import Settings

    return Settings(url="http://127.0.0.1:1", server_id="s", token="t", state_dir=Path(os.devnull), **kw)
