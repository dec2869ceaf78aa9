"""The overcloud's virtual IP: an address of its own, kept per stack, and keepalived's router id."""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

from undercloud.errors import InvalidInput
from undercloud.orchestration.overcloud.secrets import stack_dir


def choose_virtual_ip(home: Path, stack: str, candidates: list[str]) -> str:
    """The stack's virtual IP: one of `candidates` (the addresses the nodes' network keeps
    for VIPs, which no node gets), the same at every deploy (kept in the stack's directory,
    so deleting the overcloud frees it) and never one another stack of this home holds."""
    base = home / "overcloud"
    mine = stack_dir(home, stack) / "virtual-ip"
    mine.parent.mkdir(parents=True, exist_ok=True)
    with open(base / ".virtual-ip.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = mine.read_text().strip() if mine.exists() else ""
        if kept in candidates:
            return kept
        held = {p.read_text().strip(): p.parent.name for p in base.glob("*/virtual-ip") if p != mine}
        free = [a for a in candidates if a not in held]
        if not free:
            raise InvalidInput(f"the virtual IPs of the nodes' network ({', '.join(candidates) or 'none'}) are all "
                               f"held by other overclouds ({', '.join(sorted(set(held.values())))}): delete one",
                               "--stack")
        mine.write_text(free[0] + "\n")
        return free[0]


def virtual_router_id(instance: str, vip: str) -> int:
    """keepalived's VRRP virtual_router_id (1-255) for a stack's VIP: derived from this
    home's instance and the VIP, so the stacks of one home (their VIPs differ in the last
    octet) never share one, and homes are spread over the range."""
    h = int(hashlib.sha256(instance.encode()).hexdigest()[:8], 16)
    return 1 + (h + int(vip.rsplit(".", 1)[-1])) % 255
