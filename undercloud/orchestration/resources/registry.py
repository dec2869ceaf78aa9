"""Resource types by name: every `Plugin` subclass with a `type_name` in this package."""

from __future__ import annotations

import importlib
import pkgutil
import threading

from undercloud.orchestration.resources.base import Plugin, Prop

_lock = threading.Lock()
_types: dict[str, type[Plugin]] | None = None


def _discover() -> dict[str, type[Plugin]]:
    global _types
    with _lock:
        if _types is None:
            import undercloud.orchestration.resources as pkg

            found: dict[str, type[Plugin]] = {}
            for mod in pkgutil.iter_modules(pkg.__path__):
                if mod.name in ("base", "registry"):
                    continue
                module = importlib.import_module(f"{pkg.__name__}.{mod.name}")
                for obj in vars(module).values():
                    if isinstance(obj, type) and issubclass(obj, Plugin) and obj.type_name:
                        found[obj.type_name] = obj
            _types = found
    return _types


def known_types() -> set[str]:
    """The resource type names the engine can create."""
    return set(_discover())


def get(type_name: str) -> type[Plugin] | None:
    return _discover().get(type_name)


def properties_schema(type_name: str) -> dict[str, Prop] | None:
    """The properties schema of a known type (None for unknown types)."""
    cls = get(type_name)
    return None if cls is None else cls.properties_schema


def register(cls: type[Plugin]) -> type[Plugin]:
    """Register a plugin class defined outside this package (tests, extensions)."""
    _discover()[cls.type_name] = cls
    return cls
