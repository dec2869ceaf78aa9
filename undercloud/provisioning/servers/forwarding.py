"""Requests about a server another host runs, forwarded to a live worker of that host.

Several workers may share one store, each on its own host; only a container or VM server's
own host can reach its machine, so the servers service runs such a request on a worker of
that host (`env.forward`) instead of with its own realiser. Here: whose server is elsewhere,
which worker answers for it, and the forwarded request.
"""

from __future__ import annotations

from typing import Any

from undercloud.config import host_name
from undercloud.errors import ServiceUnavailable
from undercloud.provisioning.servers.base import Env
from undercloud.provisioning.servers.placement import Placement
from undercloud.store.servers import Server


class Forwarding:
    def __init__(self, env: Env, placement: Placement):
        self.env = env
        self.placement = placement

    def elsewhere(self, row: Server) -> str | None:
        """The host of a container or VM server another host runs (None: this one, or a
        server of no host: bare metal, another cloud's)."""
        if row.host in (None, host_name()):  # the usual case, asked without a query
            return None
        return row.host if row.host in self.placement.other_hosts() else None

    def worker_of(self, row: Server) -> str | None:
        workers = self.env.workers_on(row.host) if self.env.forward is not None else []
        return workers[0] if workers else None

    def on_its_host(self, row: Server, method: str, path: str, body: Any = None, worker: str | None = None) -> Any:
        """Run a request about `row` on a live worker of its host (only that host can reach
        the machine; `worker` when already found); with none alive, the operation waits for
        the host: one line."""
        worker = worker or self.worker_of(row)
        if worker is None:
            raise ServiceUnavailable(f"server {row.name} runs on host {row.host}, where no undercloud worker is "
                                     "alive; its operations wait for that host", "server")
        return self.env.forward(worker, method, path, body)
