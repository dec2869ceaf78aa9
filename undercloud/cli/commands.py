"""The command groups of the `undercloud` command, one module each."""

from __future__ import annotations

import importlib

import click

# module name -> attribute holding its click group/command
MODULES = [
    ("undercloud.cli.service", "service"),
    ("undercloud.cli.service", "serve"),
    ("undercloud.cli.template", "template"),
    ("undercloud.cli.stack", "stack"),
    ("undercloud.cli.image", "image"),
    ("undercloud.cli.node", "node"),
    ("undercloud.cli.server", "server"),
    ("undercloud.cli.flavor", "flavor"),
    ("undercloud.cli.lab", "lab"),
    ("undercloud.cli.agent", "agent"),
    ("undercloud.cli.deploy", "deploy"),
    ("undercloud.cli.overcloud", "overcloud"),
]


def groups() -> list[click.Command]:
    return [getattr(importlib.import_module(m), attr) for m, attr in MODULES]
