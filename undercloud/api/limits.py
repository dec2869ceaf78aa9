"""Limits of the HTTP API: request body sizes per route, and the sizes of names and lists.

A table of undercloud/limits.py, like orchestration/limits.py (which bounds what a
template can make the engine do): a default and an environment variable per limit, read
once at import; `override()` for tests; one line naming the variable when a limit is hit.
docs/architecture.md lists them ("Limits").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from undercloud.limits import Limit, LimitSet

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

TABLE: tuple[Limit, ...] = (
    Limit("body_bytes", "UNDERCLOUD_MAX_BODY_BYTES", 1 * MiB,
          "bytes of a request body on any route not named below"),
    Limit("stack_body_bytes", "UNDERCLOUD_MAX_STACK_BODY_BYTES", 64 * MiB,
          "bytes of a stack create/update body (the bundle's files as JSON, parameters)"),
    Limit("import_body_bytes", "UNDERCLOUD_MAX_IMPORT_BODY_BYTES", 32 * MiB,
          "bytes of a node import body (an instackenv file; 10,000 nodes are about 4 MB)"),
    Limit("signal_body_bytes", "UNDERCLOUD_MAX_SIGNAL_BODY_BYTES", 8 * MiB,
          "bytes of a signal from an agent or to a wait condition handle"),
    Limit("image_bytes", "UNDERCLOUD_MAX_IMAGE_BYTES", 64 * GiB,
          "bytes of one image upload (content is streamed to disk, never held in memory)"),
    Limit("json_depth", "UNDERCLOUD_MAX_JSON_DEPTH", 64,
          "nesting levels of a JSON request body"),
    Limit("list_limit", "UNDERCLOUD_MAX_LIST_LIMIT", 100_000,
          "largest `limit=` of a list request (events)"),
)


class Limits(LimitSet):
    body_bytes: int
    stack_body_bytes: int
    import_body_bytes: int
    signal_body_bytes: int
    image_bytes: int
    json_depth: int
    list_limit: int

    def __init__(self, environ: Mapping[str, str] = os.environ):
        super().__init__(TABLE, environ)


LIMITS = Limits(os.environ)
exceeded = LIMITS.exceeded  # one line: what, by how much, the limit and its variable
override = LIMITS.override  # tests

# (method, path pattern) -> the limit of its body; the first match wins.
BODY_ROUTES: tuple[tuple[str, re.Pattern, str], ...] = (
    ("PUT", re.compile(r"/v1/images/blobs/[^/]+"), "image_bytes"),
    ("POST", re.compile(r"/v1/stacks"), "stack_body_bytes"),
    ("PATCH", re.compile(r"/v1/stacks/[^/]+"), "stack_body_bytes"),
    ("POST", re.compile(r"/v1/nodes/import"), "import_body_bytes"),
    ("POST", re.compile(r"/v1/agent/servers/[^/]+/deployments/[^/]+/signal"), "signal_body_bytes"),
    ("POST", re.compile(r"/v1/stacks/[^/]+/resources/[^/]+/signal"), "signal_body_bytes"),
)


def body_limit(method: str, path: str) -> tuple[str, int]:
    """The name and size of the body limit of a route."""
    for m, pattern, name in BODY_ROUTES:
        if m == method and pattern.fullmatch(path):
            return name, getattr(LIMITS, name)
    return "body_bytes", LIMITS.body_bytes
