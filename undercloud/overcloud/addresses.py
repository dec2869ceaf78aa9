"""The overcloud's virtual IP: an address of its own, held per stack in the store's address
table (the service chooses it: POST /v1/hypervisors/{type}/network/virtual-ip), and
keepalived's router id."""

from __future__ import annotations

import hashlib
from pathlib import Path

from undercloud.errors import InvalidInput


def choose_virtual_ip(table, home: Path, network: str, stack: str, candidates: list[str]) -> str:
    """The stack's virtual IP: one of `candidates` (the addresses the nodes' network keeps
    for VIPs, which no node gets), held in the address table (`table`, on `network`) by
    `vip:<stack>`: the same at every deploy, released when the stack is deleted, and never
    one another stack holds."""
    from undercloud.store.addresses import VIP, NoFreeAddress, vip_holder

    _adopt_files(table, home, network, candidates)
    try:
        return table.claim(network, vip_holder(stack), candidates)
    except NoFreeAddress as exc:
        held = sorted({h.removeprefix(VIP) for h in exc.held.values()})
        raise InvalidInput(f"the virtual IPs of the nodes' network ({', '.join(candidates) or 'none'}) are all "
                           f"held by other overclouds ({', '.join(held)}): delete one", "--stack") from None


def _adopt_files(table, home: Path, network: str, candidates: list[str]) -> None:
    """Homes from before the address table kept each stack's VIP in `overcloud/<stack>/
    virtual-ip`: those of this network go into the table (then the file), so an upgrade
    hands none out twice."""
    from undercloud.store.addresses import vip_holder

    for path in (home / "overcloud").glob("*/virtual-ip"):
        try:
            vip = path.read_text().strip()
        except OSError:
            continue
        if vip in candidates:
            table.adopt(network, vip_holder(path.parent.name), vip)
            path.unlink(missing_ok=True)


def virtual_router_id(instance: str, vip: str) -> int:
    """keepalived's VRRP virtual_router_id (1-255) for a stack's VIP: derived from this
    home's instance and the VIP, so the stacks of one home (their VIPs differ in the last
    octet) never share one, and homes are spread over the range."""
    h = int(hashlib.sha256(instance.encode()).hexdigest()[:8], 16)
    return 1 + (h + int(vip.rsplit(".", 1)[-1])) % 255
