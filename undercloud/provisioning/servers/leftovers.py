"""Machines of servers deleted while their host had no live worker (Nova's local delete).

Only a server's own host can remove its machine. When that host is down (or gone for good),
deleting the server removes its record and address at once and records a Leftover; the
host's worker removes the machine when it comes back (at start, before anything is made,
and every status pass). Apart from the servers service so that both halves of that hand-over
sit together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import delete, select

from undercloud.config import host_name
from undercloud.provisioning.servers.base import Realiser, Spec
from undercloud.provisioning.servers.first_boot import FirstBootFiles
from undercloud.store import Store
from undercloud.store.addresses import Address
from undercloud.store.servers import Leftover, Server

log = logging.getLogger("undercloud.servers")


class Leftovers:
    def __init__(self, store: Store, realiser: Callable[[str], Realiser], files: FirstBootFiles):
        self.store = store
        self.realiser = realiser  # hypervisor type -> its realiser (the servers service's)
        self.files = files

    def leave(self, row: Server) -> None:
        """Nova's local delete: the server's host has no live worker (down, or gone for good),
        so the record and its address go now, in one transaction, and its machine is left to
        that host (a Leftover), whose worker removes it when it comes back (`remove`)."""
        with self.store.session() as s:
            r = s.get(Server, row.id)
            if r is None:
                return
            s.add(Leftover(id=r.id, name=r.name, host=r.host, hypervisor_type=r.hypervisor_type,
                           volumes=list(r.volumes or []), state=dict(r.state or {})))
            s.execute(delete(Address).where(Address.holder == r.id))
            s.delete(r)
        self.files.remove(row.id)
        log.warning("server %s (%s) deleted while its host %s has no live worker: that host removes its "
                    "machine when its worker comes back", row.name, row.id, row.host)

    def remove(self) -> list[str]:
        """The machines on this host of servers deleted while it was down (at start, before
        anything is made: their addresses may be another server's now; and every status pass)."""
        with self.store.session() as s:
            rows = s.scalars(select(Leftover).where(Leftover.host == host_name())).all()
        removed = []
        for lo in rows:
            spec = Spec(id=lo.id, name=lo.name, hypervisor_type=lo.hypervisor_type, flavor={}, image={},
                        image_path=None, first_boot={}, networks=[], volumes=list(lo.volumes or []),
                        state=dict(lo.state or {}))
            try:
                realiser = self.realiser(lo.hypervisor_type)
                realiser.delete(spec)
                with self.store.session() as s:
                    s.execute(delete(Leftover).where(Leftover.id == lo.id))
                removed.append(lo.name)
                realiser.cleanup()  # the network, when it was the last
            except Exception as exc:  # noqa: BLE001 - the next pass tries again
                log.warning("servers: removing the machine of deleted server %s: %s", lo.name, exc)
        if removed:
            log.info("removed the machines of servers deleted while this host was down: %s", ", ".join(removed))
        return removed
