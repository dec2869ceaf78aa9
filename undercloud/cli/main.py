"""The `undercloud` command. Each command group lives in its own module here."""

from __future__ import annotations

import sys

import click
from click.utils import make_default_short_help

from undercloud import __version__
from undercloud.cli import commands
from undercloud.cli.commands import COMMANDS
from undercloud.errors import UndercloudError


class Root(click.Group):
    """Turns user errors into one line on stderr and a non-zero exit, never a traceback.
    Imports a command's module only when that command runs (see cli/commands.py)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return commands.load(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        rows = [(name, make_default_short_help(COMMANDS[name][2], limit)) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

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


def main() -> None:
    cli(prog_name="undercloud")
