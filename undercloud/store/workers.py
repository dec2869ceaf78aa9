"""Workers: the service processes sharing one store, each heart-beating into it.

A worker is alive while its heartbeat is recent (`DEAD_AFTER` heartbeat intervals). Work is
shared among the live ones in two ways (store/… columns hold who does what):
- stack operations: the root stack row's `engine_id` names the worker running it; another
  worker takes it over when that one stops heart-beating (orchestration/engine/service.py);
- nodes: power sync is spread by a consistent hash ring over the live workers (`HashRing`),
  and a node's busy work is reserved by the worker running it (`nodes.reservation`).

Heartbeats carry each worker's own clock: workers on several hosts need their clocks in
step (NTP), as Ironic's conductors do.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from collections.abc import Iterable

from sqlalchemy import Float, Integer, String, delete, select, update
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.config import host_name
from undercloud.errors import Conflict, NotFound
from undercloud.store.db import Base, Store

HEARTBEAT_INTERVAL = float(os.environ.get("UNDERCLOUD_HEARTBEAT_INTERVAL", "2"))
DEAD_AFTER = 5  # heartbeat intervals without a beat: the worker is dead, its work is taken over


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(String(1024), default="")
    # "all", or "servers": a hypervisor host's worker (`serve --hypervisor-only`) runs its host's
    # servers and answers agents, but takes over no stack operation and syncs no node's power
    # (its host may not reach the BMCs, or run what those operations call)
    duties: Mapped[str] = mapped_column(String(16), default="all", server_default="all")
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)


class Workers:
    """This process's registration in the store, and what it knows of the others."""

    def __init__(self, store: Store, worker_id: str, url: str = "", interval: float | None = None,
                 duties: str = "all", ca_file=None):
        """`ca_file`: the CA the other workers' https URLs are verified with (the store's)."""
        self.store = store
        self.id = worker_id
        self.url = url
        self.ca_file = ca_file
        self.duties = duties
        self.interval = HEARTBEAT_INTERVAL if interval is None else interval

    @property
    def dead_after(self) -> float:
        return self.interval * DEAD_AFTER

    def join(self) -> None:
        """Register (or re-register after a restart: same id, same home)."""
        now = time.time()
        with self.store.session() as s:
            w = s.get(Worker, self.id)
            if w is None:
                s.add(Worker(id=self.id, host=host_name(), pid=os.getpid(), url=self.url, duties=self.duties,
                             started_at=now, heartbeat_at=now))
            else:
                w.host, w.pid, w.url, w.duties, w.started_at, w.heartbeat_at = (
                    host_name(), os.getpid(), self.url, self.duties, now, now)

    def beat(self) -> None:
        with self.store.engine.begin() as conn:
            found = conn.execute(update(Worker).where(Worker.id == self.id).values(heartbeat_at=time.time())).rowcount
        if not found:  # forgotten (`service workers --forget`) while it paused, or a store restored from a copy
            self.join()

    def leave(self) -> None:
        """A clean stop: the others take over at once instead of waiting for the beats to stop."""
        with self.store.engine.begin() as conn:
            conn.execute(delete(Worker).where(Worker.id == self.id))

    def live(self) -> set[str]:
        """The ids of the workers heart-beating now (this one always among them)."""
        since = time.time() - self.dead_after
        with self.store.engine.connect() as conn:
            ids = {r[0] for r in conn.execute(select(Worker.id).where(Worker.heartbeat_at >= since))}
        return ids | {self.id}

    def live_for_nodes(self) -> set[str]:
        """The live workers that share the nodes' work (power sync): not the hypervisor-only
        ones; this one only if it is not hypervisor-only."""
        since = time.time() - self.dead_after
        with self.store.engine.connect() as conn:
            ids = {r[0] for r in conn.execute(select(Worker.id).where(Worker.heartbeat_at >= since,
                                                                      Worker.duties == "all"))}
        return (ids | {self.id}) if self.duties == "all" else (ids - {self.id})

    def url_of(self, worker_id: str) -> str | None:
        with self.store.engine.connect() as conn:
            return conn.execute(select(Worker.url).where(Worker.id == worker_id)).scalar()

    def ring(self) -> HashRing:
        return HashRing(self.live_for_nodes())

    def live_hosts(self) -> set[str]:
        """The hosts with a live worker."""
        return {w["host"] for w in self.list() if w["alive"]}

    def live_on(self, host: str) -> list[str]:
        """The ids of the other live workers on `host`."""
        return sorted(w["id"] for w in self.list() if w["alive"] and w["host"] == host and not w["this"])

    def forget(self, worker_id: str) -> None:
        """Remove a dead worker from the list (the others took its work over already); a live
        one is refused: stop it first."""
        with self.store.engine.begin() as conn:
            beat = conn.execute(select(Worker.heartbeat_at).where(Worker.id == worker_id)).scalar()
            if beat is None:
                raise NotFound(f"no worker {worker_id[:80]!r} (`undercloud service workers` lists them)", "worker")
            age = time.time() - beat
            if age <= self.dead_after:
                raise Conflict(f"worker {worker_id} is alive (last heartbeat {age:.0f} s ago): stop it first",
                               "worker")
            # only if it did not beat meanwhile
            conn.execute(delete(Worker).where(Worker.id == worker_id, Worker.heartbeat_at == beat))

    def list(self) -> list[dict]:
        now = time.time()
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(Worker).order_by(Worker.started_at)).mappings().all()
        return [{"id": r["id"], "host": r["host"], "pid": r["pid"], "url": r["url"], "duties": r["duties"],
                 "alive": now - r["heartbeat_at"] <= self.dead_after,
                 "heartbeat_age_s": round(max(0.0, now - r["heartbeat_at"]), 1),
                 "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["started_at"])),
                 "this": r["id"] == self.id} for r in rows]


class HashRing:
    """Consistent hashing: each member holds `points` spots on a circle of md5 values; a key
    belongs to the first member spot at or after its own value. When a member comes or goes,
    only the keys of the spots it gains or loses move (about 1/n of them)."""

    def __init__(self, members: Iterable[str], points: int = 64):
        spots = sorted((self._hash(f"{m}#{i}"), m) for m in set(members) for i in range(points))
        self.members = sorted(set(members))
        self._keys = [h for h, _ in spots]
        self._owners = [m for _, m in spots]

    @staticmethod
    def _hash(text: str) -> int:
        return int.from_bytes(hashlib.md5(text.encode(), usedforsecurity=False).digest()[:8], "big")

    def owner(self, key: str) -> str | None:
        if not self._keys:
            return None
        i = bisect.bisect_left(self._keys, self._hash(key))
        return self._owners[i % len(self._owners)]
