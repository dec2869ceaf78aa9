"""The scheduler: picks an available node for a server request, and claims it.

`claim(request)` is safe under concurrency (threads, or several undercloud processes on
one database): the claim is a conditional UPDATE `... WHERE instance_uuid IS NULL AND
provision_state = 'available'`, so of two requests racing for a node exactly one gets it
and the other moves on to the next candidate. When nothing fits, the error says why for
every available node ("3 available nodes; 2 lack profile:control; 1 has 2048 MB < 4096 MB").

A server's create claims its node, then writes its server row. A claim whose row never came
(the service died between the two, or a claim made through the API for nothing) is given
back by the nodes' periodic loop after `CLAIM_GRACE` seconds (`release_orphans`).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from sqlalchemy import exists, func, select, update

from undercloud.errors import Conflict, InvalidInput
from undercloud.provisioning import states
from undercloud.provisioning.nodes import view
from undercloud.server_types import BAREMETAL
from undercloud.store import Store
from undercloud.store.nodes import Node, NodeEvent
from undercloud.store.servers import Server

PAGE = 128  # candidates read per query; a claim rarely needs more than the first page
RETRIES = 20  # lost races before giving up (each loss means another request got a node)
# Seconds a claim may stay without its server row before the periodic loop gives it back: a
# create writes the row right after its claim, within milliseconds (or within the store's busy
# and pool waits, a few minutes at worst), so 10 minutes never releases a create under way.
CLAIM_GRACE = float(os.environ.get("UNDERCLOUD_CLAIM_GRACE", "600"))
log = logging.getLogger("undercloud.nodes")


@dataclass
class Request:
    """What a server needs of a node (a Nova flavor + image properties, for bare metal)."""

    instance_uuid: str
    resource_class: str | None = "baremetal"
    profile: str | None = None
    capabilities: dict[str, str] = field(default_factory=dict)
    cpus: int = 0
    memory_mb: int = 0
    local_gb: int = 0
    cpu_arch: str | None = None
    hypervisor_type: str | None = None
    instance_info: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> Request:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(f"unknown request field(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        if not data.get("instance_uuid"):
            raise InvalidInput("instance_uuid: required")
        return cls(**data)


def why_not(req: Request, n) -> str | None:
    """The first reason node `n` (a Node or a row with resource_class and properties) cannot
    serve `req`, worded to be counted; None if it fits."""
    props = n.properties or {}
    caps = props.get("capabilities") or {}
    if req.resource_class and n.resource_class != req.resource_class:
        return f"have resource_class {n.resource_class}, not {req.resource_class}"
    hv = props.get("hypervisor_type", BAREMETAL)
    if req.hypervisor_type and hv != req.hypervisor_type:
        return f"are {hv}, not {req.hypervisor_type}"
    if req.profile and caps.get("profile") != req.profile:
        return f"lack profile:{req.profile}"
    for key, value in req.capabilities.items():
        if str(caps.get(key)) != str(value):
            return f"lack {key}:{value}"
    if req.cpu_arch and props.get("cpu_arch") not in (None, req.cpu_arch):
        return f"are {props.get('cpu_arch')}, not {req.cpu_arch}"
    for key, unit in (("cpus", "CPUs"), ("memory_mb", "MB"), ("local_gb", "GB")):
        need = getattr(req, key)
        have = props.get(key)
        if need and (have is None or int(have) < need):
            return f"have {have if have is not None else 'unknown'} {unit} < {need} {unit}"
    return None


class Scheduler:
    def __init__(self, store: Store):
        self.store = store

    def _candidates(self, s, req: Request, offset: int):
        # only the columns the filters read: loading whole ORM nodes tripled a claim's cost
        q = (select(Node.id, Node.resource_class, Node.properties)
             .where(Node.provision_state == states.AVAILABLE, Node.instance_uuid.is_(None),
                    Node.maintenance.is_(False))
             .order_by(Node.id).offset(offset).limit(PAGE))
        if req.resource_class:
            q = q.where(Node.resource_class == req.resource_class)
        return s.execute(q).all()

    def claim(self, req: Request) -> dict:
        """Claim one node for `req`; returns the node. Idempotent per instance_uuid."""
        with self.store.session() as s:
            held = s.scalars(select(Node).where(Node.instance_uuid == req.instance_uuid)).first()
            if held is not None:
                return view(held)
        for _ in range(RETRIES):
            lost = False
            offset = 0
            while True:
                with self.store.session() as s:
                    page = self._candidates(s, req, offset)
                if not page:
                    break
                fits = [n for n in page if why_not(req, n) is None]
                random.shuffle(fits)  # concurrent requests spread over the fits instead of colliding
                for n in fits:
                    got = self._take(n.id, req)
                    if got is not None:
                        return got
                    lost = True
                if lost:
                    break  # the page changed under us: read it again
                offset += PAGE
            if not lost:
                break
        raise Conflict(self.explain(req))

    def _take(self, node_id: str, req: Request) -> dict | None:
        with self.store.session() as s:
            res = s.execute(update(Node).where(
                Node.id == node_id, Node.instance_uuid.is_(None), Node.provision_state == states.AVAILABLE,
                Node.maintenance.is_(False),
            ).values(instance_uuid=req.instance_uuid, instance_info=req.instance_info or {}, claimed_at=time.time()))
            if res.rowcount != 1:
                return None
            s.expire_all()
            return view(s.get(Node, node_id))

    def release(self, instance_uuid: str) -> bool:
        """Give back a claimed node that was not deployed (e.g. the server create failed early)."""
        with self.store.session() as s:
            res = s.execute(update(Node).where(Node.instance_uuid == instance_uuid,
                                               Node.provision_state == states.AVAILABLE)
                            .values(instance_uuid=None, instance_info={}, claimed_at=None))
            return res.rowcount == 1

    def release_orphans(self, grace: float = CLAIM_GRACE, now: float | None = None) -> list[str]:
        """Give back the claims older than `grace` seconds whose server has no row (the node
        still available: nothing was deployed); returns the node ids. Each is one conditional
        UPDATE, so a server row written meanwhile keeps its node."""
        cutoff = (now or time.time()) - grace
        orphan = (Node.instance_uuid.is_not(None), Node.provision_state == states.AVAILABLE,
                  Node.claimed_at.is_(None) | (Node.claimed_at < cutoff),  # None: claimed before claims were timed
                  ~exists().where(Server.id == Node.instance_uuid))
        with self.store.session() as s:
            found = s.execute(select(Node.id, Node.instance_uuid).where(*orphan)).all()
        released = []
        for node_id, instance in found:
            with self.store.session() as s:
                if s.execute(update(Node).where(Node.id == node_id, Node.instance_uuid == instance, *orphan)
                             .values(instance_uuid=None, instance_info={}, claimed_at=None)).rowcount != 1:
                    continue
                s.add(NodeEvent(node_id=node_id, kind="claim", message=f"claim of server {instance} released: "
                                f"no server record {grace:.0f} s after it was made"))
            released.append(node_id)
            log.warning("node %s: claim of server %s released (no server record after %.0f s)", node_id, instance,
                        grace)
        return released

    def explain(self, req: Request) -> str:
        """Why no node fits: every available node's first failing reason, counted."""
        with self.store.session() as s:
            free = s.scalars(select(Node).where(Node.provision_state == states.AVAILABLE,
                                                Node.instance_uuid.is_(None), Node.maintenance.is_(False))).all()
            claimed = s.scalar(select(func.count()).select_from(Node).where(
                Node.provision_state == states.AVAILABLE, Node.instance_uuid.is_not(None)))
            maint = s.scalar(select(func.count()).select_from(Node).where(
                Node.provision_state == states.AVAILABLE, Node.maintenance.is_(True)))
        reasons = Counter(why_not(req, n) or "fit but were taken meanwhile" for n in free)
        parts = [f"{len(free)} available node{'s' if len(free) != 1 else ''}"]
        parts += [f"{count} {_agree(reason, count)}" for reason, count in reasons.most_common()]
        extra = [f"{claimed} claimed"] if claimed else []
        extra += [f"{maint} in maintenance"] if maint else []
        tail = f" (besides {', '.join(extra)})" if extra else ""
        return f"no node fits server {req.instance_uuid}: " + "; ".join(parts) + tail


def _agree(reason: str, count: int) -> str:
    """'1 lacks ...' / '2 lack ...': reasons are written in the plural."""
    if count != 1:
        return reason
    for plural, singular in (("lack ", "lacks "), ("have ", "has "), ("are ", "is "), ("fit ", "fits ")):
        if reason.startswith(plural):
            return singular + reason[len(plural):]
    return reason
