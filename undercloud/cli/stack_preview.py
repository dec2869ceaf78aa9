"""`undercloud stack preview`: what a stack would contain, computed locally."""

from __future__ import annotations

import click

from undercloud.cli import output
from undercloud.cli.template import load_local, report_problems, template_options


@click.command()
@template_options
@output.format_option
def preview(template: str, environments: tuple[str, ...], parameters: tuple[str, ...], fmt: str) -> None:
    """Show every resource a stack would have, without creating anything.

    Lists each resource (nested stacks' resources too, with dotted names such as
    `servers.0.config`), its type after the resource_registry, and its properties resolved
    as far as they can be before anything exists: values that need a created resource stay
    as the function that computes them (e.g. {"get_attr": ["server", "first_address"]}).
    Runs in this process; no service needed. Problems print as `file:line: path: message`.

    \b
    Examples:
      undercloud stack preview -t overcloud.yaml -e env.yaml -P ControllerCount=3
      undercloud stack preview -t app.yaml -f json
    """
    from undercloud.orchestration.template import TemplateError
    from undercloud.orchestration.template.preview import preview as compute

    try:
        rows = compute(load_local(template, environments, parameters))
    except TemplateError as exc:
        report_problems(exc, fmt)
        return
    output.emit(rows, fmt, ["name", "type", "properties"])
