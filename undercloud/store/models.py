"""Imports every domain's models so that `Base.metadata` knows all tables.

Each domain keeps its tables in its own module of this package (`store/stacks.py`,
`store/nodes.py`, `store/images.py`, ...), listed here once.
"""

from undercloud.store import (  # noqa: F401
    addresses,
    agent,
    clouds,
    images,
    lab_networks,
    meta,
    networks,
    nodes,
    overcloud,
    servers,
    stacks,
    workers,
    workflows,
)
