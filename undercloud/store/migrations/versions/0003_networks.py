"""Networks, subnets and ports: the address bookkeeping of the OS::Neutron::* types
(store/networks.py).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "networks",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("mtu", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False))
    op.create_index(op.f("ix_networks_name"), "networks", ["name"])
    op.create_table(
        "subnets",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("cidr", sa.String(length=64), nullable=False),
        sa.Column("ip_version", sa.Integer(), nullable=False),
        sa.Column("gateway_ip", sa.String(length=64), nullable=True),
        sa.Column("allocation_pools", sa.JSON(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False))
    op.create_index(op.f("ix_subnets_network_id"), "subnets", ["network_id"])
    op.create_index(op.f("ix_subnets_name"), "subnets", ["name"])
    op.create_table(
        "network_ports",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("network_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("mac_address", sa.String(length=17), nullable=False, unique=True),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False))
    op.create_index(op.f("ix_network_ports_network_id"), "network_ports", ["network_id"])
    op.create_table(
        "port_addresses",
        sa.Column("subnet_id", sa.String(length=36), primary_key=True),
        sa.Column("ip_address", sa.String(length=64), primary_key=True),
        sa.Column("port_id", sa.String(length=36), nullable=False))
    op.create_index(op.f("ix_port_addresses_port_id"), "port_addresses", ["port_id"])


def downgrade() -> None:
    for table in ("port_addresses", "network_ports", "subnets", "networks"):
        op.drop_table(table)
