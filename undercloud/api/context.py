"""What one running undercloud holds: its home, its store, and the domain services.

Domain services are created on first use so that a command touching only stacks does not
start, say, the power-sync loop. Each is one attribute here.
"""

from __future__ import annotations

import os
import threading
from functools import cached_property
from urllib.parse import urlsplit

from undercloud.config import Home, host_name
from undercloud.errors import UndercloudError
from undercloud.host.run import route_source
from undercloud.store import Store


class Context:
    def __init__(self, home: Home, db_url: str | None = None, listen: str = "127.0.0.1",
                 hypervisor_only: bool = False):
        self.home = home.ensure()
        self.listen = listen  # the address the API is served on (`serve --listen`)
        # `serve --hypervisor-only`: this worker runs its host's servers and answers agents and
        # the API; it takes over no stack operation and syncs no node's power
        self.hypervisor_only = hypervisor_only
        self.store = Store(db_url or home.db_url, key_file=home.store_key_file()).create_schema()
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

        return ServerMetadata(self.store, lambda: self.agent_url, lambda: self.tls.ca_pem)

    @cached_property
    def stacks(self):
        """The stack engine; resource plugins reach the other services through this Context."""
        from undercloud.orchestration.engine import StackService

        svc = StackService(self.store, services=self)
        from undercloud.api.workers import forward_signal

        svc.worker_id, svc.live_workers, svc.dead_after = self.workers.id, self.workers.live, self.workers.dead_after
        svc.takes_over = not self.hypervisor_only
        svc.forward_signal = lambda *a: forward_signal(self.workers, *a)
        return svc

    @cached_property
    def workers(self):
        """This process among the workers sharing the store (heartbeats: api/workers.py)."""
        from undercloud.store.workers import Workers

        return Workers(self.store, self.home.worker_id(), url=self.agent_url,
                       duties="servers" if self.hypervisor_only else "all", ca_file=self.home.ca_file)

    @property
    def api_url(self) -> str:
        """Where nodes and the other workers reach this service (wait condition handles,
        agents, forwarded requests): UNDERCLOUD_AGENT_URL, else the address it listens on;
        listening on every address (0.0.0.0), the one this host reaches the store from (a
        worker on another host: the others reach it on the network they share the store on)."""
        url = os.environ.get("UNDERCLOUD_AGENT_URL")
        if url:
            return url
        address = self.listen
        if address in ("0.0.0.0", ""):
            try:  # no host (SQLite), a Unix socket's directory, no route: none another host reaches
                source = route_source(self.store.engine.url.host)
            except UndercloudError:
                source = None
            address = source if source and not source.startswith("127.") else "127.0.0.1"
        elif address == "localhost":
            address = "127.0.0.1"
        return f"http://{address}:{self._api_port}"

    @property
    def agent_url(self) -> str:
        """Where agents and the other workers reach this service: `api_url` over TLS, verified
        by the CA every worker of the store shares (UNDERCLOUD_AGENT_URL as given)."""
        url = self.api_url
        return url if os.environ.get("UNDERCLOUD_AGENT_URL") else "https://" + url.removeprefix("http://")

    @cached_property
    def tls(self):
        """The service's certificate (api/tls_port.py), for loopback, this host's name and
        the address nodes and workers are given; realisers add theirs (`serve_name`)."""
        from undercloud.api.tls_port import ServerTLS
        from undercloud.store.crypto import crypto_of

        names = {"127.0.0.1", "localhost", host_name(), urlsplit(self.api_url).hostname or "127.0.0.1"}
        if self.listen not in ("0.0.0.0", ""):
            names.add(self.listen)
        # the CA derives from the store's key: the workers sharing the store make the same one
        seed = crypto_of(self.store.engine.dialect).derived("undercloud certificate authority").encode()
        return ServerTLS(self.home.tls_dir, sorted(names), seed)

    @cached_property
    def _api_port(self) -> int:
        # read once: every published deployment names this URL, and the port is the one
        # the service listens on until it stops
        return self.home.api_port()

    @cached_property
    def nodes(self):
        from undercloud.provisioning.nodes import NodeService
        from undercloud.server_types import BAREMETAL

        # pm_type openstack: its cloud's entry; the bare-metal realiser deploys, tears down
        # and inspects nodes with the deploy ramdisk (servers/baremetal.py)
        svc = NodeService(self.store, enforce_power=os.environ.get("UNDERCLOUD_POWER_ENFORCE") == "1",
                          cloud_config=self.clouds.config, deploy_interface=lambda: self.servers.realiser(BAREMETAL))
        svc.worker_id, svc.live_workers, svc.ring_workers = self.workers.id, self.workers.live, self.workers.live_for_nodes
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
    def workflows(self):
        from undercloud.store.workflows import Workflows

        return Workflows(self.store)

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
                  tls_name=self.tls.serve_name, ca=lambda: self.tls.ca_pem,
                  nodes=self.nodes, scheduler=self.scheduler, images=self.images, clouds=self.clouds,
                  addresses=self.addresses, lab_networks=self.lab_networks, endpoint=self.endpoint,
                  hosts_up=self.workers.live_hosts, workers_on=self.workers.live_on,
                  forward=lambda worker, method, path, body: forward_admin(self, worker, method, path, body),
                  revoke_agent=self.server_metadata.revoke, node_pods=self.server_metadata.kube_pods)
        return ServersService(self.store, env)

    @cached_property
    def addresses(self):
        """Who holds which address of the lab networks: servers and overcloud VIPs."""
        from undercloud.store.addresses import AddressTable

        return AddressTable(self.store)

    @cached_property
    def lab_networks(self):
        """Lab networks that span hypervisor hosts: subnets, members, tunnel ends."""
        from undercloud.store.lab_networks import LabNetworks

        return LabNetworks(self.store)

    def endpoint(self) -> str | None:
        """Where other hosts reach this one (the host of `api_url`), None when only this host
        does (a loopback address)."""
        from urllib.parse import urlsplit

        host = urlsplit(self.api_url).hostname
        return None if not host or host == "localhost" or host.startswith("127.") else host

    @cached_property
    def listeners(self):
        """Extra addresses the API is served on, for guests on lab networks."""
        from undercloud.api.listeners import Listeners

        return Listeners(self)

    @cached_property
    def scheduler(self):
        from undercloud.provisioning.scheduler import Scheduler

        return Scheduler(self.store)

