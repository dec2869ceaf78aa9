"""A VXLAN port on a bridge, to the same bridge on other hosts: one layer-2 segment over
whatever routes the hosts (store/lab_networks.py says who is on it).

Head-end replication, no multicast: one all-zero forwarding entry per other host (broadcast
and unknown frames go to each), and the kernel learns where each MAC address lives from what
it receives. The port's MTU is the bridge's usual 1500 whatever the route between the hosts
carries: with no `dev` the kernel fragments an encapsulated frame that does not fit (its
outer packets are sent without DF), so nothing on the bridge needs a smaller MTU.
"""

from __future__ import annotations

import json

from undercloud.host.run import run

PORT = 4789  # IANA's VXLAN port
MTU = 1500
FLOOD = "00:00:00:00:00:00"


def _link(name: str) -> dict | None:
    proc = run(["ip", "-d", "-j", "link", "show", "dev", name], check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout or "[]")
    return data[0] if data else None


def ensure(name: str, vni: int, local: str, bridge: str) -> None:
    """The port `name` (VXLAN `vni`, sent from `local`) up on `bridge`; made again when it
    exists with another id or source address (this host's address changed)."""
    link = _link(name)
    info = ((link or {}).get("linkinfo") or {}).get("info_data") or {}
    if link is not None and (info.get("id") != vni or info.get("local") != local):
        run(["ip", "link", "del", name])
        link = None
    if link is None:
        run(["ip", "link", "add", name, "mtu", str(MTU), "type", "vxlan", "id", str(vni), "local", local,
             "dstport", str(PORT)])
    if link is None or link.get("master") != bridge or "UP" not in (link.get("flags") or []):
        run(["ip", "link", "set", name, "master", bridge, "up"])


def peers(name: str) -> set[str]:
    """The hosts the port floods to."""
    proc = run(["bridge", "-j", "fdb", "show", "dev", name], check=False)
    if proc.returncode != 0:
        return set()
    return {e["dst"] for e in json.loads(proc.stdout or "[]") if e.get("mac") == FLOOD and e.get("dst")}


def set_peers(name: str, want: set[str]) -> tuple[set[str], set[str]]:
    """Flood to exactly `want`; returns (added, removed)."""
    have = peers(name)
    for dst in sorted(want - have):
        run(["bridge", "fdb", "append", FLOOD, "dev", name, "dst", dst])
    for dst in sorted(have - want):
        run(["bridge", "fdb", "del", FLOOD, "dev", name, "dst", dst], check=False)
    return want - have, have - want


def remove(name: str) -> bool:
    return run(["ip", "link", "del", name], check=False).returncode == 0
