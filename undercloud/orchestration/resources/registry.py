"""Resource types by name: every `Plugin` subclass with a `type_name` in this package."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading

from undercloud.orchestration.resources.base import Plugin, Prop

log = logging.getLogger("undercloud.resources")
_lock = threading.Lock()
_types: dict[str, type[Plugin]] | None = None
_schemas: dict[type, dict] = {}  # plugin class -> its schema as dicts (asked once per resource)
_known: frozenset[str] | None = None  # the names, asked once per resource at validation


def _discover() -> dict[str, type[Plugin]]:
    global _types
    if _types is not None:  # asked for each resource: no lock once found
        return _types
    with _lock:
        if _types is None:
            import undercloud.orchestration.resources as pkg

            found: dict[str, type[Plugin]] = {}
            for mod in pkgutil.iter_modules(pkg.__path__):
                if mod.name in ("base", "registry"):
                    continue
                try:
                    module = importlib.import_module(f"{pkg.__name__}.{mod.name}")
                except Exception:  # one broken plugin module must not take every type down
                    log.exception("resource plugin module %s failed to import; its types are unknown", mod.name)
                    continue
                for obj in vars(module).values():
                    if isinstance(obj, type) and issubclass(obj, Plugin) and obj.type_name:
                        found[obj.type_name] = obj
            _types = found
    return _types


def known_types() -> frozenset[str]:
    """The resource type names the engine can create."""
    global _known
    if _known is None:
        _known = frozenset(_discover())
    return _known


def get(type_name: str) -> type[Plugin] | None:
    return _discover().get(type_name)


def properties_schema(type_name: str) -> dict[str, dict] | None:
    """The properties schema of a known type as plain dicts (None for unknown types):
    name -> {type, required, default, update_allowed, description[, schema][, allowed][, min, limit]}."""
    cls = get(type_name)
    if cls is None:
        return None
    cached = _schemas.get(cls)
    if cached is None:
        cached = _schemas[cls] = {k: _as_dict(p) for k, p in cls.properties_schema.items()}
    return cached


def _as_dict(p: Prop) -> dict:
    d = {"type": p.type, "required": p.required, "default": p.default, "update_allowed": p.update_allowed,
         "description": p.description}
    if p.schema is not None:
        d["schema"] = {k: _as_dict(v) for k, v in p.schema.items()}
    if p.allowed is not None:
        d["allowed"] = list(p.allowed)
    if p.limit is not None:
        d["min"], d["limit"] = p.min, p.limit
    return d


def register(cls: type[Plugin]) -> type[Plugin]:
    """Register a plugin class defined outside this package (tests, extensions)."""
    global _known
    _discover()[cls.type_name] = cls
    _known = None
    return cls


def unregister(type_name: str) -> None:
    """Forget a type `register` added (tests)."""
    global _known
    _discover().pop(type_name, None)
    _known = None
