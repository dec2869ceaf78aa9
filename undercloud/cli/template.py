"""`undercloud template validate`: check a HOT template and its environments, locally."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from undercloud.cli import output
from undercloud.errors import InvalidInput


def parse_parameters(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--parameter K=V` options -> {K: V}."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"expected KEY=VALUE, got {pair!r}", "--parameter")
        out[key] = value
    return out


def template_options(f: Callable) -> Callable:
    """The options every command that reads a template takes."""
    f = click.option("-P", "--parameter", "parameters", multiple=True, metavar="KEY=VALUE",
                     help="A parameter value; repeat for several. As in Heat, `parameters` in -e files win over it.")(f)
    f = click.option("-e", "--environment", "environments", multiple=True, metavar="ENV",
                     type=click.Path(dir_okay=False),
                     help="An environment file; repeat for several, merged in order (later wins).")(f)
    f = click.option("-t", "--template", required=True, type=click.Path(dir_okay=False),
                     help="The HOT template file.")(f)
    return f


def load_local(template: str, environments: tuple[str, ...], parameters: tuple[str, ...]) -> Any:
    """Read and validate a template tree in this process (no service needed)."""
    import gc

    from undercloud import gc_settings
    from undercloud.orchestration.template import Bundle, load

    gc_settings.apply()
    params = parse_parameters(parameters)
    bundle = Bundle.from_paths(template, list(environments))
    gc.freeze()  # a command's data lives until it exits: no collection (the last one at exit included) walks it
    tmpl = load(bundle, params, stack_name="preview", partial=True)
    gc.freeze()
    return tmpl


def report_problems(exc: Exception, fmt: str) -> None:
    """Print every problem (one line each) and exit 1; `-f json` prints them as data."""
    problems = getattr(exc, "problems", None) or [str(exc)]
    if fmt == "json":
        click.echo(json.dumps({"valid": False, "problems": problems}, indent=2))
    for p in problems:
        click.echo(f"error: {p}", err=True)
    sys.exit(1)


@click.group()
def template() -> None:
    """Work with HOT templates (Heat Orchestration Templates).

    Templates may use every HOT version from 2013-05-23 to 2021-04-16 (wallaby) with the
    functions and sections of that version. Environments (-e) give `parameters`,
    `parameter_defaults` and a `resource_registry`, merged in order as Heat's server does.
    """


@template.command()
@template_options
@output.format_option
def validate(template: str, environments: tuple[str, ...], parameters: tuple[str, ...], fmt: str) -> None:
    """Validate a template with its environments and nested templates.

    Prints the template's parameters (hidden ones masked) and exits 0, or prints one line
    per problem as `file:line: path.to.node: message` and exits 1. Nothing is created and
    no service is needed; parameters without a value are allowed here (create needs them).

    \b
    Examples:
      undercloud template validate -t overcloud.yaml -e env.yaml -P NodeCount=3
      undercloud template validate -t app.yaml -f json
    """
    from undercloud.orchestration.template import TemplateError

    try:
        tmpl = load_local(template, environments, parameters)
    except TemplateError as exc:
        report_problems(exc, fmt)
        return
    rows = [{"name": p.name, "type": p.type, "default": p.shown(p.default),
             "description": p.description, **({"hidden": True} if p.hidden else {})}
            for p in tmpl.parameters.values()]
    if fmt in ("json", "yaml"):
        output.emit({"valid": True, "version": tmpl.version.name, "description": tmpl.description,
                     "parameters": rows, "resources": len(tmpl.resources)}, fmt)
        return
    output.note(f"{template}: valid (heat_template_version {tmpl.version.name}, "
                f"{len(tmpl.resources)} resources, {len(tmpl.parameters)} parameters)")
    if rows:
        output.emit(rows, fmt, ["name", "type", "default", "description"])


@template.command()
@output.formatted(columns=["version", "name", "functions"])
def versions() -> list[dict]:
    """List the HOT versions and the intrinsic functions each one allows.

    A template may only call the functions of its own `heat_template_version`; validate
    names the first version that has a function when a template uses it too early.
    """
    from undercloud.orchestration.template.functions import Removed
    from undercloud.orchestration.template.versions import ALL_VERSIONS

    return [{"version": v.name, "name": v.alias,
             "functions": ", ".join(sorted(n for n, c in v.functions.items() if c is not Removed))}
            for v in ALL_VERSIONS]
