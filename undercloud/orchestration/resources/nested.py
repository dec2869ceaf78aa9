"""Template resources: a resource whose type is a template file is a nested stack.

Not registered by name (its type is a file); the engine uses it for every resource whose
definition has a `template_file`. Its properties are the child's parameters, its attributes
the child's outputs (plus `OS::stack_id`).
"""

from __future__ import annotations

from typing import Any

from undercloud.orchestration.resources.base import NestedStackPlugin


class TemplateResource(NestedStackPlugin):
    type_name = ""  # not in the registry
    update_any = True  # a changed property is a changed parameter: the nested stack updates

    def nested_template(self, parent_template: Any) -> Any:
        return parent_template.nested(self.name, self.properties)

    def attributes(self) -> dict:
        # As Heat: `OS::stack_id` is the child's output of that name if it has one, else null
        view = self.nested
        outputs = {k: (v or {}).get("value") for k, v in (view.outputs or {}).items()} if view else {}
        return {"OS::stack_id": None, **outputs}

    def reference_id(self) -> str:
        """What `get_resource` gives: as Heat, the child's `OS::stack_id` output where it has
        one (TripleO's net-config templates give their SoftwareConfig's id so), else the
        nested stack's id."""
        given = self.attributes().get("OS::stack_id")
        if given is not None:
            return str(given)
        view = self.nested
        return str((view.stack_id if view else None) or self.physical_id or self.name)
