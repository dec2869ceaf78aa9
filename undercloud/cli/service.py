"""`undercloud service start|stop|status|install|uninstall` and `undercloud serve`."""

from __future__ import annotations

import errno
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import click

from undercloud import daemon
from undercloud.agent.files import write_atomic
from undercloud.cli.output import formatted, note
from undercloud.config import Home
from undercloud.errors import InvalidInput


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
    return {"pid": h["pid"], "url": daemon.url(home), "ca": str(home.ca_file), "store": h["store"],
            "home": h["home"]}


@service.command()
def stop():
    """Stop the service (in-progress operations resume at the next start)."""
    p = daemon.stop(Home.current())
    note(f"stopped (pid {p})" if p else "not running")


@service.command()
@formatted()
def status():
    """Show whether the service runs: pid, API URL (https), the CA certificate that URL is
    verified with (for curl --cacert, httpx verify=, the agents), when the service's
    certificate ends (it is issued again within 30 days of that), store. Exit 3 when it does
    not run."""
    home = Home.current()
    h = daemon.health(home)
    if not h:
        held = daemon.serving(home)
        note(f"running (pid {held}) but not answering; see {home.file('service.log')}" if held else "not running")
        raise SystemExit(3)
    return {"status": "running", "pid": h["pid"], "url": daemon.url(home), "ca": str(home.ca_file),
            "store": h["store"], "home": h["home"], "uptime_s": h["uptime"], "version": h["version"],
            "certificate_expires": h.get("certificate_expires")}


@service.command()
@click.option("--forget", "forget", metavar="ID", multiple=True,
              help="Remove a dead worker from the list first (its work was taken over already); repeatable.")
@formatted(["id", "host", "pid", "alive", "heartbeat_age_s", "url", "this"])
def workers(forget):
    """List the service processes sharing this store: alive while they heart-beat; the work
    of one that stops is taken over by the others (`undercloud serve --worker`).

    \b
    Examples:
      undercloud service workers -f json
      undercloud service workers --forget host2-1a2b3c   # a worker that will not come back
    """
    from undercloud.cli.client import Client

    client = Client()
    for worker_id in forget:
        client.delete(f"/v1/workers/{quote(worker_id, safe='')}")
    return client.get("/v1/workers")


@click.command()
@click.option("--db", envvar="UNDERCLOUD_DB", help="Store URL: sqlite:///FILE or postgresql://...")
@click.option("--worker", is_flag=True,
              help="Join the workers of a store another service already uses: needs --db (or UNDERCLOUD_DB) "
                   "and that store's key (UNDERCLOUD_STORE_KEY=FILE), and a home of its own (UNDERCLOUD_HOME).")
@click.option("--listen", default="127.0.0.1", show_default=True, envvar="UNDERCLOUD_LISTEN", metavar="ADDRESS",
              help="Serve the API on this address (0.0.0.0: every address of this host), e.g. a worker on "
                   "another host, which the other workers and its servers' agents must reach.")
@click.option("--hypervisor-only", is_flag=True,
              help="With --worker: run this host's container servers (and answer agents and the API), but take "
                   "over no stack operation and sync no node's power: a hypervisor host's worker.")
def serve(db: str | None, worker: bool, listen: str, hypervisor_only: bool) -> None:
    """Run the undercloud service in the foreground (for systemd or debugging).

    Several services can share one store, each with its own home: stack operations and
    nodes' power sync are shared among them, and one that stops heart-beating has its
    operations taken over by another within about ten seconds. Other workers and nodes
    reach a worker at UNDERCLOUD_AGENT_URL, else at its --listen address (for 0.0.0.0: its
    address on the route to the store's host). A worker on another host with
    UNDERCLOUD_LAB_NETWORK=NAME puts its container servers on that lab network of the first
    host (the `network` that `undercloud server network` shows there), through a VXLAN
    tunnel between the hosts (UDP 4789): one subnet, one address table, reachable both ways.

    \b
    Examples:
      undercloud serve                         # what `service start` runs, in the foreground
      UNDERCLOUD_HOME=/srv/w2 UNDERCLOUD_STORE_KEY=/etc/uc-store.key \\
        undercloud serve --worker --db postgresql://undercloud@db.example:5432/undercloud --listen 0.0.0.0
      UNDERCLOUD_LAB_NETWORK=uc1a2b3c-lab ... undercloud serve --worker --hypervisor-only ...
    """
    home = Home.current()
    if hypervisor_only and not worker:
        raise InvalidInput("--hypervisor-only is a worker's: give --worker too", where="--hypervisor-only")
    if worker:
        daemon.check_worker(home, db)
    daemon.serve(home, db, host=listen, hypervisor_only=hypervisor_only)


# --- a systemd unit, for operators who run the service as their other services -----------------

UNIT_DIR = "/etc/systemd/system"
_ROOT_HINT = {errno.EACCES: " (run as root, e.g. with sudo)", errno.EPERM: " (run as root, e.g. with sudo)"}


def _quote(value: str) -> str:
    """One word of a unit file: specifiers and variables escaped, quoted when it has spaces."""
    value = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{value}"' if any(c.isspace() for c in value) or not value else value


def _unit_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.@-]*", name):
        raise InvalidInput(f"bad unit name {name!r}: letters, digits, '_', '.', '@', '-'", where="--name")
    return name.removesuffix(".service") + ".service"


def render_unit(home: Path, user: str, executable: list[str]) -> str:
    """The unit running `undercloud serve` for one home as one user."""
    return f"""\
# Written by `undercloud service install`; remove with `undercloud service uninstall`.
[Unit]
Description=Undercloud service (home {str(home).replace("%", "%%")})
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
User={user}
Environment={_quote(f"UNDERCLOUD_HOME={home}")}
ExecStart={" ".join(_quote(a) for a in executable)} serve
# stderr goes to the journal; the service also appends to the home's service.log
SyslogIdentifier=undercloud
Restart=on-failure
RestartSec=5
# Another service holds the home (e.g. one started by `undercloud service start`): fail once,
# the journal naming its pid, rather than restart in a loop until it stops.
RestartPreventExitStatus={daemon.HOME_HELD}
# Stop the service alone: what it started (container nodes, the podman API service, lab BMCs)
# keeps running, as with `undercloud service stop`, and the next start takes it up again.
KillMode=process
TimeoutStopSec=60
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
"""


def _executable() -> list[str]:
    """How to run this very installation: its `undercloud` script, else its Python."""
    script = Path(sys.executable).with_name("undercloud")
    return [str(script)] if os.access(script, os.X_OK) else [sys.executable, "-m", "undercloud"]


def _systemctl(*args: str) -> None:
    """Run systemctl when systemd manages this machine (not in containers or CI machines)."""
    if Path("/run/systemd/system").is_dir() and shutil.which("systemctl"):
        subprocess.run(["systemctl", *args], check=False)


@service.command()
@click.option("--home", "home_dir", type=click.Path(file_okay=False),
              help="The home to serve [default: $UNDERCLOUD_HOME, else the user's ~/.local/share/undercloud]")
@click.option("--user", default=None, help="Run the service as this user [default: the current user]")
@click.option("--name", default="undercloud", show_default=True, help="Unit name (one per home)")
@click.option("--unit-dir", default=UNIT_DIR, show_default=True, type=click.Path(file_okay=False),
              help="Where to write the unit")
@click.option("--print", "print_only", is_flag=True, help="Print the unit instead of writing it")
def install(home_dir: str | None, user: str | None, name: str, unit_dir: str, print_only: bool):
    """Write a systemd unit that runs `undercloud serve` for a home.

    Then: `systemctl enable --now NAME`, `systemctl status NAME`, `systemctl restart NAME`,
    `journalctl -u NAME`. The database URL, if not the home's SQLite file, goes in a drop-in
    (`systemctl edit NAME`: `[Service]` `Environment=UNDERCLOUD_DB=...`), not in the unit.
    """
    unit = _unit_name(name)
    user = user or pwd.getpwuid(os.getuid()).pw_name
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise InvalidInput(f"no such user: {user}", where="--user") from None
    if home_dir:
        home = Path(home_dir).expanduser().resolve()
    elif os.environ.get("UNDERCLOUD_HOME") and account.pw_uid == os.getuid():
        home = Home.current().path
    else:
        home = Path(account.pw_dir) / ".local" / "share" / "undercloud"
    text = render_unit(home, user, _executable())
    if print_only:
        click.echo(text, nl=False)
        return
    path = Path(unit_dir) / unit
    try:
        write_atomic(path, text, 0o644, parents=False)  # a missing unit directory is an error
    except OSError as exc:
        raise InvalidInput(f"cannot write the unit: {exc.strerror}{_ROOT_HINT.get(exc.errno, '')}",
                           where=str(path)) from None
    _systemctl("daemon-reload")
    note(f"wrote {path} (home {home}, user {user})")
    running = daemon.pid(Home(home))
    if running:
        note(f"a service for this home runs already (pid {running}): `undercloud service stop` it first")
    note(f"start it at boot and now: systemctl enable --now {unit.removesuffix('.service')}")


@service.command()
@click.option("--name", default="undercloud", show_default=True, help="Unit name")
@click.option("--unit-dir", default=UNIT_DIR, show_default=True, type=click.Path(file_okay=False))
def uninstall(name: str, unit_dir: str):
    """Stop and disable the systemd unit and remove it (the home and its state stay)."""
    unit = _unit_name(name)
    path = Path(unit_dir) / unit
    if not path.exists():
        note(f"not installed: {path}")
        return
    _systemctl("disable", "--now", unit)
    try:
        path.unlink()
    except OSError as exc:
        raise InvalidInput(f"cannot remove the unit: {exc.strerror}{_ROOT_HINT.get(exc.errno, '')}",
                           where=str(path)) from None
    _systemctl("daemon-reload")
    note(f"removed {path}")
