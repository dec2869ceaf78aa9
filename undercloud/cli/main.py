"""The `undercloud` command. Each command group lives in its own module here."""

from __future__ import annotations

import sys

import click

from undercloud import __version__
from undercloud.errors import UndercloudError


class Root(click.Group):
    """Turns user errors into one line on stderr and a non-zero exit, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UndercloudError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=Root, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="undercloud")
def cli() -> None:
    """Undercloud deploys and operates a cloud's control plane from Heat templates.

    It provisions nodes (bare metal through their BMC, libvirt VMs or podman containers),
    builds their images, orchestrates the deployment from HOT templates and configures
    each node through its agent.

    State lives in $UNDERCLOUD_HOME (default ~/.local/share/undercloud). Commands that
    need the undercloud service start it in the background when it is not running.
    """


def _register() -> None:
    from undercloud.cli import commands

    for group in commands.groups():
        cli.add_command(group)


def main() -> None:
    _register()
    cli(prog_name="undercloud")
