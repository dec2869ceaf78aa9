"""One address table: the stacks' ports' addresses move from `port_addresses` into
`addresses` (store/addresses.py), held by `port:<port id>/<address>` on `subnet:<subnet id>`
(the key of a subnet whose network names no address space, as every network made before
this revision), so servers, virtual IPs and ports are held in one place.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import ipaddress
import time

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

ADDRESSES = sa.table("addresses", sa.column("network", sa.String), sa.column("address", sa.String),
                     sa.column("holder", sa.String), sa.column("created_at", sa.Float))
PORT_ADDRESSES = sa.table("port_addresses", sa.column("subnet_id", sa.String), sa.column("ip_address", sa.String),
                          sa.column("port_id", sa.String))


def upgrade() -> None:
    conn = op.get_bind()
    now = time.time()
    rows = [{"network": f"subnet:{sid}", "address": ip, "holder": f"port:{port}/{ip}", "created_at": now}
            for sid, ip, port in conn.execute(sa.select(PORT_ADDRESSES.c.subnet_id, PORT_ADDRESSES.c.ip_address,
                                                        PORT_ADDRESSES.c.port_id))]
    if rows:
        op.bulk_insert(ADDRESSES, rows)
    op.drop_index(op.f("ix_port_addresses_port_id"), table_name="port_addresses")
    op.drop_table("port_addresses")


def downgrade() -> None:
    op.create_table(
        "port_addresses",
        sa.Column("subnet_id", sa.String(length=36), primary_key=True),
        sa.Column("ip_address", sa.String(length=64), primary_key=True),
        sa.Column("port_id", sa.String(length=36), nullable=False))
    op.create_index(op.f("ix_port_addresses_port_id"), "port_addresses", ["port_id"])
    conn = op.get_bind()
    ports = conn.execute(sa.select(ADDRESSES.c.network, ADDRESSES.c.address, ADDRESSES.c.holder)
                         .where(ADDRESSES.c.holder.startswith("port:"))).all()
    port_net = dict(conn.execute(sa.text("SELECT id, network_id FROM network_ports")).all())
    subnets = conn.execute(sa.text("SELECT id, network_id, cidr FROM subnets")).all()
    back = []
    for network, address, holder in ports:
        port = holder.removeprefix("port:").split("/", 1)[0]
        if network.startswith("subnet:"):
            sid = network.removeprefix("subnet:")
        else:  # on its network's address space (the ctlplane): the subnet whose range holds it
            sid = next((s for s, net, cidr in subnets if net == port_net.get(port)
                        and ipaddress.ip_address(address) in ipaddress.ip_network(cidr)), None)
        if sid is not None:
            back.append({"subnet_id": sid, "ip_address": address, "port_id": port})
    if back:
        op.bulk_insert(PORT_ADDRESSES, back)
    conn.execute(sa.delete(ADDRESSES).where(ADDRESSES.c.holder.startswith("port:")))
