"""Template resources: a resource whose type is a template file is a nested stack.

Not registered by name (its type is a file); the engine uses it for every resource whose
definition has a `template_file`. Its properties are the child's parameters, its attributes
the child's outputs (plus `OS::stack_id`).
"""

from __future__ import annotations

from typing import Any

from undercloud.orchestration.resources.base import Plugin


class TemplateResource(Plugin):
    type_name = ""  # not in the registry
    update_any = True  # a changed property is a changed parameter: the nested stack updates

    def nested_template(self, parent_template: Any) -> Any:
        return parent_template.nested(self.name, self.properties)

    def attributes(self) -> dict:
        view = self.nested
        outputs = {k: (v or {}).get("value") for k, v in (view.outputs or {}).items()} if view else {}
        return {**outputs, "OS::stack_id": view.stack_id if view else None}

    def reference_id(self) -> str:
        attrs = self.attributes()
        return str(attrs.get("OS::stack_id") or self.name)
