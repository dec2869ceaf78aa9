"""The address table: who holds which address — of the undercloud's own networks (container,
VM and bare-metal servers on the lab networks, an overcloud's virtual IP) and of the
stacks' Neutron-like subnets (ports, store/networks.py). The one place an address is held.

A row is (network, address) -> holder. The network is a key its allocator chooses (the
podman network's name, the lab bridge's, `subnet:<id>`); the holder a server id,
`vip:<stack>`, or `port:<id>/<address>` (a port holds one row per address).
Who takes which host number of the lab's /24 is declared once, in host/labnet.py.

A claim is an INSERT the database decides, as the scheduler's node claim is an UPDATE it
decides: (network, address) is the primary key, so of two claims racing for one address
exactly one commits and the other tries the next free one. That holds for threads and
for processes, on SQLite and PostgreSQL alike. A holder holds one address at a time (its
column is unique): a claim that gives it another drops the old row in the same
transaction, so a refused claim leaves it what it had.

"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import Float, String, delete, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from undercloud.errors import Conflict
from undercloud.store.db import Base


class Address(Base):
    __tablename__ = "addresses"

    network: Mapped[str] = mapped_column(String(255), primary_key=True)
    address: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(300), unique=True)  # a server id, vip:<stack>, port:<id>/<address>
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class AddressTaken(Conflict):
    """The exact address asked for is another holder's (`holder`)."""

    def __init__(self, message: str, holder: str):
        super().__init__(message)
        self.holder = holder


class NoFreeAddress(Conflict):
    """Every candidate is held (`held`: how many of them)."""

    def __init__(self, message: str, held: dict[str, str]):
        super().__init__(message)
        self.held = held


VIP = "vip:"  # holders of overclouds' virtual IPs
PORT = "port:"  # holders of the stacks' ports' addresses (store/networks.py); every other holder is a server


def vip_holder(stack: str) -> str:
    """The holder of an overcloud's virtual IP: released with its root stack (engine purge)."""
    return f"{VIP}{stack}"


def port_prefix(port_id: str) -> str:
    return f"{PORT}{port_id}/"


def port_holder(port_id: str, address: str) -> str:
    """The holder of one of a port's addresses (a port may hold several, a holder one)."""
    return f"{port_prefix(port_id)}{address}"


def is_server(holder: str) -> bool:
    return not holder.startswith((VIP, PORT))


def holder_words(holder: str) -> str:
    """A holder as a message names it."""
    if holder.startswith(VIP):
        return f"the virtual IP of stack {holder[len(VIP):]}"
    if holder.startswith(PORT):
        return f"port {holder[len(PORT):].split('/', 1)[0]}"
    return f"server {holder}"


class AddressTable:
    def __init__(self, store):
        self.store = store

    def claim(self, network: str, holder: str, candidates: Iterable[str] = (), *, exact: str | None = None) -> str:
        """`exact`, or the first free one of `candidates`, for `holder` on `network`; the
        address it holds already when that is one of them (a repeated create, a rebuild)."""
        want = [exact] if exact else list(candidates)
        while True:
            mine, used = self._read(network, holder)
            if mine in want:
                return mine
            free = [a for a in want if a not in used]
            if not free:
                if exact:
                    raise AddressTaken(f"{exact} on {network} is held by {used[exact]}", used[exact])
                raise NoFreeAddress(f"no free address on {network} ({len(want)} held)",
                                    {a: used[a] for a in want})
            if self._insert(network, holder, free[0]):
                return free[0]
            # Taken meanwhile (or this holder was given one): read again. Each lost
            # insert is another claim's win, so this ends.

    def _read(self, network: str, holder: str) -> tuple[str | None, dict[str, str]]:
        with self.store.session() as s:
            mine = s.execute(select(Address.network, Address.address).where(Address.holder == holder)).first()
            used = dict(s.execute(select(Address.address, Address.holder).where(Address.network == network)).all())
        return (mine.address if mine is not None and mine.network == network else None), used

    def _insert(self, network: str, holder: str, address: str) -> bool:
        try:
            with self.store.session() as s:
                s.execute(delete(Address).where(Address.holder == holder))  # back if the insert fails
                s.execute(insert(Address).values(network=network, address=address, holder=holder,
                                                 created_at=time.time()))
            return True
        except IntegrityError:
            return False

    def adopt(self, network: str, holder: str, address: str) -> bool:
        """Record an address a holder had before this table (an upgrade's import): kept
        when neither the holder nor the address is in the table yet."""
        try:
            with self.store.session() as s:
                s.execute(insert(Address).values(network=network, address=address, holder=holder,
                                                 created_at=time.time()))
            return True
        except IntegrityError:
            return False

    def release(self, holder: str) -> list[str]:
        """Give back what `holder` holds; returns it (empty when it held nothing)."""
        with self.store.session() as s:
            return list(s.scalars(delete(Address).where(Address.holder == holder).returning(Address.address)))

    def held(self, holder: str) -> tuple[str, str] | None:
        """(network, address) that `holder` holds, or None."""
        with self.store.session() as s:
            row = s.execute(select(Address.network, Address.address).where(Address.holder == holder)).first()
        return None if row is None else (row.network, row.address)

    def on(self, network: str) -> dict[str, str]:
        """{address: holder} of `network`."""
        with self.store.session() as s:
            return dict(s.execute(select(Address.address, Address.holder).where(Address.network == network)
                                  .order_by(Address.address)).all())
