"""The Undercloud agent: runs on every node (bare python3, standard library only).

It collects the node's metadata from the undercloud, applies it (os-apply-config
templates, os-refresh-config phases, heat-config hooks) and signals the results back.
Nothing here may import from the rest of the `undercloud` package: images install only
`undercloud/__init__.py` and this directory on the node.
"""
