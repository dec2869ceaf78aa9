"""Helpers for the agent tests: a real undercloud API (uvicorn in a thread) that can be
stopped and started again on the same port and store, and agent settings in a tmp dir."""

from __future__ import annotations

import ssl
import threading
import time
from pathlib import Path

import uvicorn

from tests.conftest import free_port  # noqa: F401 - the agent tests take it from here
from undercloud.agent import engine
from undercloud.agent.settings import Settings
from undercloud.api.app import create_app
from undercloud.api.context import Context
from undercloud.api.tls_port import http_protocol
from undercloud.config import Home


class LiveService:
    """The undercloud API on 127.0.0.1:port over the store in `home`."""

    def __init__(self, home: Path, plain_agents: bool = False):
        """`plain_agents`: servers registered as an agent configured before TLS is (an
        http:// URL, a token plain HTTP still takes: tokens.TLS_SERVER)."""
        self.plain_agents = plain_agents
        self.home = Home(home).ensure()
        self.port = free_port()
        self.home.file("port").write_text(str(self.port))
        self.url = f"http://127.0.0.1:{self.port}"  # as agents configured before TLS reach it
        self.api_url = f"https://127.0.0.1:{self.port}"  # as the CLI does: the admin token over TLS only
        self.server: uvicorn.Server | None = None
        self.ctx: Context | None = None

    def start(self) -> LiveService:
        self.ctx = Context(self.home)
        if self.plain_agents:
            self.ctx.server_metadata._url = lambda: self.url
        config = uvicorn.Config(create_app(self.ctx), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False, http=http_protocol(self.ctx.tls))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.tls = ssl.create_default_context(cafile=str(self.home.ca_file))
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test service did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.server:
            self.ctx.server_metadata.release()  # as the service's own stop (daemon.py): held long-polls answer now
            self.server.should_exit = True
            self.thread.join(20)
            self.ctx.store.engine.dispose()
            self.server = None

    @property
    def meta(self):
        return self.ctx.server_metadata


def settings(tmp: Path, url: str, server_id: str, token: str, **kw) -> Settings:
    for d in ("state", "templates", "out", "refresh", "hooks"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    kw.setdefault("interval", 0.5)
    return Settings(url=url, server_id=server_id, token=token, state_dir=tmp / "state",
                    templates=tmp / "templates", output_root=tmp / "out", refresh_dir=tmp / "refresh",
                    hooks_dir=tmp / "hooks", request_timeout=5, **kw)


def deployment(did: str, name: str, group: str, config, inputs=None, outputs=None, options=None) -> dict:
    return {"id": did, "name": name, "group": group, "config": config,
            "inputs": inputs or [], "outputs": outputs or [], "options": options or {}}


def wait_for(cond, timeout: float = 30, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class FakeEngine(engine.Engine):
    """A mode's engine over a fake node's `listing(mode)` and `start(mode, name, restart)`,
    looked up at each call (a test may replace either)."""

    def __init__(self, node, mode: str):
        self.node, self.name = node, mode

    def containers(self):
        return self.node.listing(self.name)

    def start(self, container, restart=False):
        self.node.start(self.name, container, restart)

    def exec_runner(self, pod, container):
        return None  # probes are the fake node's (probes.probe replaced)
