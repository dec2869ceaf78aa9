"""`undercloud service start|stop|status` and `undercloud serve`."""

from __future__ import annotations

import click

from undercloud.api import daemon
from undercloud.cli.output import formatted, note
from undercloud.config import Home


@click.group()
def service() -> None:
    """Start, stop and inspect the undercloud service (API, engine, background loops).

    Other commands start the service themselves when it is not running; these commands
    are for controlling it explicitly.
    """


@service.command()
@click.option("--db", envvar="UNDERCLOUD_DB", help="Store URL: sqlite:///FILE or postgresql://...")
@formatted()
def start(db: str | None):
    """Start the service in the background (does nothing if it runs)."""
    home = Home.current()
    h, started = daemon.start(home, db)
    note("started" if started else "already running")
    return {"pid": h["pid"], "url": daemon.url(home), "store": h["store"], "home": h["home"]}


@service.command()
def stop():
    """Stop the service (in-progress operations resume at the next start)."""
    p = daemon.stop(Home.current())
    note(f"stopped (pid {p})" if p else "not running")


@service.command()
@formatted()
def status():
    """Show whether the service runs: pid, API URL, store. Exit 3 when it does not run."""
    home = Home.current()
    h = daemon.health(home)
    if not h:
        note("not running")
        raise SystemExit(3)
    return {"status": "running", "pid": h["pid"], "url": daemon.url(home), "store": h["store"],
            "home": h["home"], "uptime_s": h["uptime"], "version": h["version"]}


@click.command()
@click.option("--db", envvar="UNDERCLOUD_DB", help="Store URL: sqlite:///FILE or postgresql://...")
def serve(db: str | None) -> None:
    """Run the undercloud service in the foreground (for systemd or debugging)."""
    daemon.serve(Home.current(), db)
