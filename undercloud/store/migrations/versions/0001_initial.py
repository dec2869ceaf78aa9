"""The schema as it was before Alembic (what `create_all` made up to commit 5dcd646).

A store made then has no alembic_version table: store/migrate.py brings it to this
revision's columns (add_missing_columns) and stamps it, then upgrades.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('agent_deployments',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('server_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.Column('document', sa.JSON(), nullable=False),
    sa.Column('signal', sa.JSON(), nullable=True),
    sa.Column('signalled_at', sa.Float(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_agent_deployments_owner'), 'agent_deployments', ['owner'], unique=False)
    op.create_index(op.f('ix_agent_deployments_server_id'), 'agent_deployments', ['server_id'], unique=False)
    op.create_table('agent_servers',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('extra', sa.JSON(), nullable=False),
    sa.Column('revision', sa.Float(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('flavors',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('ram', sa.Integer(), nullable=False),
    sa.Column('disk', sa.Integer(), nullable=False),
    sa.Column('properties', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('hypervisor_hosts',
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('hypervisor_type', sa.String(length=32), nullable=False),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('memory_mb', sa.Integer(), nullable=False),
    sa.Column('disk_gb', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name', 'hypervisor_type')
    )
    op.create_table('images',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('disk_format', sa.String(length=16), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('checksum', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('properties', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_images_checksum', 'images', ['checksum'], unique=False)
    op.create_index('ix_images_name', 'images', ['name'], unique=False)
    op.create_table('nodes',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('driver', sa.String(length=32), nullable=False),
    sa.Column('driver_info', sa.JSON(), nullable=False),
    sa.Column('bmc_key', sa.String(length=512), nullable=False),
    sa.Column('properties', sa.JSON(), nullable=False),
    sa.Column('resource_class', sa.String(length=80), nullable=True),
    sa.Column('provision_state', sa.String(length=32), nullable=False),
    sa.Column('target_state', sa.String(length=32), nullable=True),
    sa.Column('provision_updated_at', sa.Float(), nullable=False),
    sa.Column('power_state', sa.String(length=16), nullable=True),
    sa.Column('power_sync_failures', sa.Integer(), nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('maintenance', sa.Boolean(), nullable=False),
    sa.Column('maintenance_reason', sa.Text(), nullable=True),
    sa.Column('instance_uuid', sa.String(length=36), nullable=True),
    sa.Column('instance_info', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('bmc_key'),
    sa.UniqueConstraint('name')
    )
    op.create_index(op.f('ix_nodes_instance_uuid'), 'nodes', ['instance_uuid'], unique=False)
    op.create_index(op.f('ix_nodes_provision_state'), 'nodes', ['provision_state'], unique=False)
    op.create_table('servers',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('hypervisor_type', sa.String(length=32), nullable=False),
    sa.Column('flavor', sa.JSON(), nullable=False),
    sa.Column('image_id', sa.String(length=36), nullable=False),
    sa.Column('image_name', sa.String(length=255), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=True),
    sa.Column('vcpus', sa.Integer(), nullable=False),
    sa.Column('ram', sa.Integer(), nullable=False),
    sa.Column('disk', sa.Integer(), nullable=False),
    sa.Column('node_id', sa.String(length=36), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('task', sa.String(length=32), nullable=True),
    sa.Column('fault', sa.Text(), nullable=True),
    sa.Column('task_at', sa.Float(), nullable=False),
    sa.Column('networks', sa.JSON(), nullable=False),
    sa.Column('addresses', sa.JSON(), nullable=False),
    sa.Column('volumes', sa.JSON(), nullable=False),
    sa.Column('notes', sa.JSON(), nullable=False),
    sa.Column('metadata', sa.JSON(), nullable=False),
    sa.Column('owner', sa.String(length=64), nullable=True),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_servers_host'), 'servers', ['host'], unique=False)
    op.create_index(op.f('ix_servers_name'), 'servers', ['name'], unique=False)
    op.create_index(op.f('ix_servers_status'), 'servers', ['status'], unique=False)
    op.create_table('stack_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('root_id', sa.String(length=36), nullable=False),
    sa.Column('stack_id', sa.String(length=36), nullable=False),
    sa.Column('stack_name', sa.String(length=255), nullable=False),
    sa.Column('path', sa.String(length=1024), nullable=False),
    sa.Column('resource_name', sa.String(length=255), nullable=False),
    sa.Column('physical_id', sa.String(length=255), nullable=True),
    sa.Column('resource_type', sa.String(length=255), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_stack_events_root_id'), 'stack_events', ['root_id'], unique=False)
    op.create_table('stack_resources',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('uuid', sa.String(length=36), nullable=False),
    sa.Column('stack_id', sa.String(length=36), nullable=False),
    sa.Column('root_id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('type', sa.String(length=255), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=False),
    sa.Column('physical_id', sa.String(length=255), nullable=True),
    sa.Column('ref', sa.Text(), nullable=True),
    sa.Column('requires', sa.JSON(), nullable=True),
    sa.Column('properties', sa.JSON(), nullable=True),
    sa.Column('rsrc_metadata', sa.JSON(), nullable=True),
    sa.Column('attributes', sa.JSON(), nullable=True),
    sa.Column('data', sa.JSON(), nullable=True),
    sa.Column('nested_id', sa.String(length=36), nullable=True),
    sa.Column('replaced_by', sa.String(length=36), nullable=True),
    sa.Column('deletion_policy', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('uuid')
    )
    op.create_index(op.f('ix_stack_resources_root_id'), 'stack_resources', ['root_id'], unique=False)
    op.create_index('ix_stack_resources_stack_name', 'stack_resources', ['stack_id', 'name'], unique=False)
    op.create_table('stacks',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('root_id', sa.String(length=36), nullable=False),
    sa.Column('parent_id', sa.String(length=36), nullable=True),
    sa.Column('parent_resource', sa.String(length=255), nullable=True),
    sa.Column('path', sa.String(length=1024), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('status_reason', sa.Text(), nullable=False),
    sa.Column('bundle', sa.JSON(), nullable=True),
    sa.Column('parameters', sa.JSON(), nullable=False),
    sa.Column('prev_bundle', sa.JSON(), nullable=True),
    sa.Column('prev_parameters', sa.JSON(), nullable=True),
    sa.Column('operation', sa.JSON(), nullable=True),
    sa.Column('outputs', sa.JSON(), nullable=True),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_stacks_name'), 'stacks', ['name'], unique=False)
    op.create_index(op.f('ix_stacks_root_id'), 'stacks', ['root_id'], unique=False)
    op.create_table('node_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('node_id', sa.String(length=36), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['node_id'], ['nodes.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_node_events_node_at', 'node_events', ['node_id', 'id'], unique=False)
    op.create_table('node_ports',
    sa.Column('address', sa.String(length=17), nullable=False),
    sa.Column('node_id', sa.String(length=36), nullable=False),
    sa.ForeignKeyConstraint(['node_id'], ['nodes.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('address')
    )
    op.create_index(op.f('ix_node_ports_node_id'), 'node_ports', ['node_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_node_ports_node_id'), table_name='node_ports')
    op.drop_table('node_ports')
    op.drop_index('ix_node_events_node_at', table_name='node_events')
    op.drop_table('node_events')
    op.drop_index(op.f('ix_stacks_root_id'), table_name='stacks')
    op.drop_index(op.f('ix_stacks_name'), table_name='stacks')
    op.drop_table('stacks')
    op.drop_index('ix_stack_resources_stack_name', table_name='stack_resources')
    op.drop_index(op.f('ix_stack_resources_root_id'), table_name='stack_resources')
    op.drop_table('stack_resources')
    op.drop_index(op.f('ix_stack_events_root_id'), table_name='stack_events')
    op.drop_table('stack_events')
    op.drop_index(op.f('ix_servers_status'), table_name='servers')
    op.drop_index(op.f('ix_servers_name'), table_name='servers')
    op.drop_index(op.f('ix_servers_host'), table_name='servers')
    op.drop_table('servers')
    op.drop_index(op.f('ix_nodes_provision_state'), table_name='nodes')
    op.drop_index(op.f('ix_nodes_instance_uuid'), table_name='nodes')
    op.drop_table('nodes')
    op.drop_index('ix_images_name', table_name='images')
    op.drop_index('ix_images_checksum', table_name='images')
    op.drop_table('images')
    op.drop_table('hypervisor_hosts')
    op.drop_table('flavors')
    op.drop_table('agent_servers')
    op.drop_index(op.f('ix_agent_deployments_server_id'), table_name='agent_deployments')
    op.drop_index(op.f('ix_agent_deployments_owner'), table_name='agent_deployments')
    op.drop_table('agent_deployments')
