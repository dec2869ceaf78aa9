"""What one running undercloud holds: its home, its store, and the domain services.

Domain services are created on first use so that a command touching only stacks does not
start, say, the power-sync loop. Each is one attribute here.
"""

from __future__ import annotations

import os
import threading
from functools import cached_property
from pathlib import Path

from undercloud.config import Home
from undercloud.store import Store
from undercloud.store.crypto import KEY_FILE


class Context:
    def __init__(self, home: Home, db_url: str | None = None):
        self.home = home.ensure()
        self.store = Store(db_url or home.db_url, key_file=key_file(home)).create_schema()
        self.stopping = threading.Event()

    @cached_property
    def admin_token(self) -> str:
        return self.home.admin_token()

    @cached_property
    def images(self):
        from undercloud.images.store import ImageStore

        images = ImageStore(self.home, self.store)
        images.peers = lambda: [w["url"] for w in self.workers.list() if w["alive"] and not w["this"] and w["url"]]
        return images

    @cached_property
    def server_metadata(self):
        """Per-server metadata documents and tokens for the agents (cached in memory)."""
        from undercloud.orchestration.server_metadata import ServerMetadata

        # UNDERCLOUD_AGENT_URL: where nodes reach this service (e.g. its lab-network address).
        return ServerMetadata(self.store, lambda: os.environ.get("UNDERCLOUD_AGENT_URL")
                              or f"http://127.0.0.1:{self.home.api_port()}")

    @cached_property
    def stacks(self):
        """The stack engine; resource plugins reach the other services through this Context."""
        from undercloud.orchestration.engine import StackService

        svc = StackService(self.store, services=self)
        from undercloud.api.workers import forward_signal

        svc.worker_id, svc.live_workers, svc.dead_after = self.workers.id, self.workers.live, self.workers.dead_after
        svc.forward_signal = lambda *a: forward_signal(self.workers, *a)
        return svc

    @cached_property
    def workers(self):
        """This process among the workers sharing the store (heartbeats: api/workers.py)."""
        from undercloud.store.workers import Workers

        return Workers(self.store, self.home.worker_id(), url=self.api_url)

    @property
    def api_url(self) -> str:
        """Where nodes reach this service (wait condition handles, agents)."""
        return os.environ.get("UNDERCLOUD_AGENT_URL") or f"http://127.0.0.1:{self.home.api_port()}"

    @cached_property
    def nodes(self):
        from undercloud.provisioning.drivers import openstack
        from undercloud.provisioning.nodes import NodeService

        openstack.cloud_config = lambda name: self.clouds.config(name)  # pm_type openstack: its cloud
        svc = NodeService(self.store, enforce_power=os.environ.get("UNDERCLOUD_POWER_ENFORCE") == "1")
        svc.worker_id, svc.live_workers = self.workers.id, self.workers.live
        return svc

    @cached_property
    def clouds(self):
        """OpenStack clouds known by name (QuintupleO's targets)."""
        from undercloud.provisioning.clouds import Clouds

        return Clouds(self.store)

    @cached_property
    def worker_token(self) -> str:
        """What one worker shows another when it forwards a request (every worker holds the
        store's key, so every worker can make it; it never leaves the workers)."""
        from undercloud.store.crypto import crypto_of

        return crypto_of(self.store.engine.dialect).derived("undercloud worker request")

    @cached_property
    def overcloud_states(self):
        from undercloud.store.overcloud import OvercloudStates

        return OvercloudStates(self.store)

    @cached_property
    def cloud_lab(self):
        """Empty servers in a cloud to enrol as nodes (`lab up --cloud`)."""
        from undercloud.provisioning.cloud_lab import CloudLab

        return CloudLab(self.clouds, self.home.instance)

    @cached_property
    def servers(self):
        """Servers (container / VM / bare metal), flavors and hypervisor hosts."""
        from undercloud.api.workers import forward_admin
        from undercloud.provisioning.servers.base import Env
        from undercloud.provisioning.servers.service import ServersService

        env = Env(home=self.home, api_port=self.home.api_port(), listen=self.listeners.listen,
                  nodes=self.nodes, scheduler=self.scheduler, images=self.images, clouds=self.clouds,
                  addresses=self.addresses, hosts_up=self.workers.live_hosts, workers_on=self.workers.live_on,
                  forward=lambda worker, method, path, body: forward_admin(self, worker, method, path, body))
        return ServersService(self.store, env)

    @cached_property
    def addresses(self):
        """Who holds which address of the lab networks: servers and overcloud VIPs."""
        from undercloud.store.addresses import AddressTable

        return AddressTable(self.store)

    @cached_property
    def listeners(self):
        """Extra addresses the API is served on, for guests on lab networks."""
        from undercloud.api.listeners import Listeners

        return Listeners(self)

    @cached_property
    def scheduler(self):
        from undercloud.provisioning.scheduler import Scheduler

        return Scheduler(self.store)


def key_file(home: Home) -> Path:
    """The store's key: `<home>/store.key`, or the file UNDERCLOUD_STORE_KEY names (a store
    shared by several homes, e.g. PostgreSQL, needs the same key in each)."""
    env = os.environ.get("UNDERCLOUD_STORE_KEY")
    return Path(env) if env else home.file(KEY_FILE)

