"""The HOT template language: load a template + environments, validate, resolve.

The contract with the engine is docs/template-api.md; in short:
`Bundle.from_paths(...)` -> `load(bundle, parameters)` -> `StackTemplate` with
`parameters`, `resources`, `outputs`, `dependencies()`, `resolve(snippet, resolver)`,
`nested(name, properties)` and `child_from_dict(...)`.
"""

from undercloud.orchestration.template.bundle import Bundle
from undercloud.orchestration.template.definitions import OutputDefinition, ResourceDefinition, known_types
from undercloud.orchestration.template.environment import Environment
from undercloud.orchestration.template.evaluation import PlaceholderResolver, Resolver, select_path
from undercloud.orchestration.template.functions import Unknown, render
from undercloud.orchestration.template.parameters import Parameter
from undercloud.orchestration.template.source import TemplateError
from undercloud.orchestration.template.stack import MAX_NESTING_DEPTH, StackTemplate, load, load_environment

__all__ = [
    "Bundle", "Environment", "MAX_NESTING_DEPTH", "OutputDefinition", "Parameter",
    "PlaceholderResolver", "ResourceDefinition", "Resolver", "StackTemplate", "TemplateError",
    "Unknown", "known_types", "load", "load_environment", "render", "select_path",
]
