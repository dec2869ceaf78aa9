"""Printing results: a table for people, `-f json|yaml|value` for scripts.

Every listing/showing command takes `-f/--format` through the `formatted` decorator and
returns plain data (a dict for one object, a list of dicts for many).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import click

FORMATS = ("table", "json", "yaml", "value")


def format_option(f: Callable) -> Callable:
    return click.option(
        "-f", "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
        help="Output format: a table for people; json, yaml or value for scripts.",
    )(f)


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return ""
    columns = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [sep, "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |", sep]
    out += ["| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |" for row in cells]
    out.append(sep)
    return "\n".join(out)


def emit(data: Any, fmt: str, columns: Sequence[str] | None = None) -> None:
    """Print `data` (dict = one object, list = rows) in the chosen format."""
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif fmt == "yaml":
        import yaml  # here: 20 ms of every command's start otherwise

        click.echo(yaml.safe_dump(data, sort_keys=True, default_flow_style=False).rstrip())
    elif fmt == "value":
        rows = data if isinstance(data, list) else [data]
        for r in rows:
            if isinstance(r, dict):
                cols = columns or list(r.keys())
                click.echo(" ".join(_cell(r.get(c)) for c in cols))
            else:
                click.echo(_cell(r))
    elif isinstance(data, list):
        text = table(data, columns)
        if text:
            click.echo(text)
    elif isinstance(data, dict):
        click.echo(table([{"Field": k, "Value": _cell(v)} for k, v in data.items()]))
    else:
        click.echo(_cell(data))


def formatted(columns: Sequence[str] | None = None) -> Callable:
    """Decorator: add `-f` and print what the command returns."""

    def deco(f: Callable) -> Callable:
        @format_option
        @functools.wraps(f)
        def wrapper(*args, fmt: str, **kwargs):
            data = f(*args, **kwargs)
            if data is not None:
                emit(data, fmt, columns)

        return wrapper

    return deco


def note(message: str) -> None:
    """A line for people on stderr; stdout stays parseable."""
    click.echo(message, err=True)
