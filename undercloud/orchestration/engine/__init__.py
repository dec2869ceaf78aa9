"""The stack engine: walks a template's resource graph (nested stacks included) through
the resource plugins; see walk.py (the walk), writer.py (batched store writes) and
service.py (the operations the API offers)."""

from undercloud.orchestration.engine.service import StackService

__all__ = ["StackService"]
