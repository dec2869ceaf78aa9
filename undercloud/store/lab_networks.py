"""Lab networks that span hypervisor hosts.

A host's container servers live on its lab network (a podman network and its bridge,
provisioning/servers/container_net.py). Another host's worker may join that network
(`UNDERCLOUD_LAB_NETWORK`): its own bridge gets the same subnet, and a VXLAN between the
hosts' bridges (host/tunnel.py) makes them one layer-2 segment, so an overcloud's roles may
run on several hosts and still reach each other and their virtual IP.

What the hosts must agree on is here: the network's subnet and its first host's address on
it (the `lab_networks` row, written once by the first host), and for each host its tunnel's
end (the address the other hosts reach it at) and its worker's address on the network (a
`lab_network_members` row). Addresses of servers stay in the address table (addresses.py),
keyed by the network's name, so every host hands out addresses from one pool.
"""

from __future__ import annotations

import hashlib
import time

from sqlalchemy import Float, String, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.store.db import Base


class LabNetwork(Base):
    __tablename__ = "lab_networks"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)  # the address table's key
    subnet: Mapped[str] = mapped_column(String(64))
    gateway: Mapped[str] = mapped_column(String(64))  # the first host's address on it
    host: Mapped[str] = mapped_column(String(255))    # the first host
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class LabNetworkMember(Base):
    __tablename__ = "lab_network_members"

    network: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255), primary_key=True)
    endpoint: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: no other host reaches it
    address: Mapped[str] = mapped_column(String(64))  # its worker's address on the network
    updated_at: Mapped[float] = mapped_column(Float, default=time.time)


def vni(name: str) -> int:
    """The VXLAN id of a lab network: derived from its name, so every host agrees on it."""
    return 1 + int.from_bytes(hashlib.sha256(name.encode()).digest()[:3], "big") % (2**24 - 2)


def _row(n: LabNetwork) -> dict:
    return {"name": n.name, "subnet": n.subnet, "gateway": n.gateway, "host": n.host}


class LabNetworks:
    def __init__(self, store):
        self.store = store

    def define(self, name: str, subnet: str, gateway: str, host: str) -> dict:
        """Record the network as its first host made it; the row already there wins (a
        network is defined once, by whoever made it first)."""
        try:
            with self.store.session() as s:
                s.execute(insert(LabNetwork).values(name=name, subnet=subnet, gateway=gateway, host=host,
                                                    created_at=time.time()))
        except IntegrityError:
            pass
        found = self.get(name)
        assert found is not None  # inserted, or there before
        return found

    def get(self, name: str) -> dict | None:
        with self.store.session() as s:
            n = s.get(LabNetwork, name)
            return None if n is None else _row(n)

    def join(self, name: str, host: str, endpoint: str | None, address: str) -> None:
        """This host is on the network: where its tunnel ends, its worker's address there."""
        values = {"endpoint": endpoint, "address": address, "updated_at": time.time()}
        with self.store.session() as s:
            done = s.execute(update(LabNetworkMember).where(LabNetworkMember.network == name,
                                                            LabNetworkMember.host == host).values(**values))
            if done.rowcount:
                return
        try:
            with self.store.session() as s:
                s.execute(insert(LabNetworkMember).values(network=name, host=host, **values))
        except IntegrityError:  # joined meanwhile by another worker of this host: same facts
            pass

    def members(self, name: str) -> list[dict]:
        with self.store.session() as s:
            rows = s.scalars(select(LabNetworkMember).where(LabNetworkMember.network == name)
                             .order_by(LabNetworkMember.host)).all()
            return [{"host": m.host, "endpoint": m.endpoint, "address": m.address} for m in rows]

    def leave(self, host: str) -> None:
        """A host retired for good (`server hypervisors --forget`) leaves every network."""
        with self.store.session() as s:
            s.execute(delete(LabNetworkMember).where(LabNetworkMember.host == host))
