"""What resource plugins may use of the running undercloud: one typed interface.

The engine hands every plugin an object of this shape as `Plugin.services`. The running
service's `api.context.Context` is one (each attribute made on first use); an engine run on
its own (unit tests, benchmarks) gets `EngineOnly`, which has the store and the engine's
own lookups, and whose other attributes fail the resource in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from undercloud.orchestration.resources.base import ResourceFailure

if TYPE_CHECKING:
    from undercloud.config import Home
    from undercloud.orchestration.engine import StackService
    from undercloud.orchestration.server_metadata import ServerMetadata
    from undercloud.provisioning.servers.service import ServersService
    from undercloud.store import Store


class PluginServices(Protocol):
    @property
    def store(self) -> Store:
        """The store: networks and ports (the Neutron types) live there."""

    @property
    def stacks(self) -> StackService:
        """The stack engine: a resource of another stack by its physical id."""

    @property
    def home(self) -> Home:
        """The undercloud's home: where agent configurations are written."""

    @property
    def server_metadata(self) -> ServerMetadata:
        """Per-server metadata, tokens and deployments for the agents."""

    @property
    def servers(self) -> ServersService:
        """Container, VM and bare-metal servers."""

    @property
    def api_url(self) -> str:
        """Where nodes reach this service (signal URLs)."""


class EngineOnly:
    """The services of an engine run without the undercloud around it."""

    api_url = "http://127.0.0.1"

    def __init__(self, store: Store, stacks: StackService):
        self.store = store
        self.stacks = stacks

    @property
    def home(self) -> Home:
        raise ResourceFailure("this undercloud has no home (the engine runs on its own)")

    @property
    def server_metadata(self) -> ServerMetadata:
        raise ResourceFailure("no agent metadata service in this undercloud")

    @property
    def servers(self) -> ServersService:
        raise ResourceFailure("no servers service in this undercloud")
