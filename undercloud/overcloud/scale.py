"""Scale-in: which nodes an update removes, and draining compute nodes before they go.

Which nodes: the engine's own dry run of the update (so `<Role>Count`, `removal_policies`
and whatever else the environments say decide, as they will when it runs). A removed node
of a role that runs nova-compute is drained through the overcloud's own APIs
(openstacksdk, as admin): its instances are refused unless the operator says yes, then
deleted; then its nova-compute service record (which frees its placement provider); its
Neutron agents once the node is gone (until then it would register them again), and its
service record and placement provider again if its nova-compute made them anew meanwhile.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from undercloud.errors import UndercloudError

REMOVED = re.compile(r"^(\w+)Servers\.([^.\s]+) \(removed\)$")
COMPUTE_SERVICE = "nova_compute"


def removed_nodes(stack: str, dry_run: dict, get: Callable[..., Any]) -> dict[str, str]:
    """node name -> role, for every server the dry-run update would delete."""
    out = {}
    for path in dry_run.get("delete") or []:
        m = REMOVED.match(path)
        if not m:
            continue
        res = get(f"/v1/stacks/{stack}/resources/{m.group(1)}Servers.{m.group(2)}")
        server_id = res.get("physical_resource_id")
        if server_id:
            out[get(f"/v1/servers/{server_id}")["name"]] = m.group(1)
    return out


def connect(auth_url: str, password: str, cacert: str | None = None):
    """The overcloud's admin, on its public endpoints (https ones verified with `cacert`)."""
    import openstack

    return openstack.connection.Connection(
        auth_url=auth_url, username="admin", password=password, project_name="admin", user_domain_name="Default",
        project_domain_name="Default", region_name="RegionOne", interface="public", compute_api_version="2.53",
        **({"cacert": cacert} if cacert else {}))


def instances_on(conn, host: str) -> list:
    """Every project's instances on `host` (filtered by Nova, and checked here again)."""
    found = conn.compute.servers(all_projects=True, compute_host=host)
    return sorted((s for s in found if s.compute_host == host), key=lambda s: s.name or s.id)


def drain(conn, host: str, say: Callable[[str], None], timeout: float = 300) -> None:
    """Delete the instances on `host` (waiting until they are gone), then its nova-compute
    service record."""
    servers = instances_on(conn, host)
    for s in servers:
        conn.compute.delete_server(s)
    deadline = time.monotonic() + timeout
    for s in servers:
        try:
            conn.compute.wait_for_delete(s, wait=max(1, int(deadline - time.monotonic())))
        except Exception as exc:  # noqa: BLE001 - openstacksdk's ResourceTimeout and API errors alike
            raise UndercloudError(f"instance {s.name} on {host} was not deleted: {exc}", "deploy") from None
        say(f"scale-in: {host}: instance {s.name} ({s.id}) deleted")
    from openstack.exceptions import ConflictException

    for svc in conn.compute.services(host=host, binary="nova-compute"):
        # An instance Nova shows DELETED (openstacksdk's wait ends there) may still be
        # finishing its delete on the host: 2025.1 refuses to delete the service until it is
        # done (409, "hosting instances"), so that is asked again until the deadline.
        while True:
            try:
                conn.compute.delete_service(svc)
                break
            except ConflictException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)
        say(f"scale-in: {host}: its nova-compute service record deleted")


def forget_agents(conn, host: str, say: Callable[[str], None]) -> None:
    """Once the node is gone: its Neutron agents, and what its nova-compute may have made
    again between the drain and its end (its resource tracker re-creates the placement
    provider a deleted service record freed)."""
    for agent in conn.network.agents(host=host):
        conn.network.delete_agent(agent)
        say(f"scale-in: {host}: Neutron agent {agent.binary} deleted")
    for svc in conn.compute.services(host=host, binary="nova-compute"):
        conn.compute.delete_service(svc)
        say(f"scale-in: {host}: its nova-compute service record, made again before the node went, deleted")
    for rp in conn.placement.resource_providers(name=host):
        conn.placement.delete_resource_provider(rp)
        say(f"scale-in: {host}: its placement resource provider deleted")
