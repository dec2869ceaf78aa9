"""`undercloud cloud ...`: OpenStack clouds known by name, from the clouds.yaml users have."""

from __future__ import annotations

import os
from pathlib import Path

import click

from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note
from undercloud.errors import InvalidInput

COLUMNS = ["name", "auth_url", "username", "project_name", "region_name", "source"]


def search_path() -> list[Path]:
    """Where openstacksdk looks for clouds.yaml, in its order."""
    return [Path.cwd() / "clouds.yaml", Path.home() / ".config/openstack/clouds.yaml",
            Path("/etc/openstack/clouds.yaml")]


def _clouds(path: Path) -> dict:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror}", "--clouds-yaml") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InvalidInput(f"{where}: not YAML: {getattr(exc, 'problem', None) or exc}", "--clouds-yaml") from None
    clouds = doc.get("clouds") if isinstance(doc, dict) else None
    if not isinstance(clouds, dict):
        raise InvalidInput(f"{path}: no `clouds:` map", "--clouds-yaml")
    return clouds


def read_entry(clouds_yaml: str | None, cloud: str) -> tuple[dict, str]:
    """(the entry of `cloud`, where it came from): from the file given, else the first
    clouds.yaml openstacksdk would read; secrets from a secure.yaml beside it are merged in,
    as openstacksdk does."""
    if clouds_yaml:
        path = Path(clouds_yaml)
    else:
        env = os.environ.get("OS_CLIENT_CONFIG_FILE")
        found = [Path(env)] if env else [p for p in search_path() if p.is_file()]
        if not found:
            raise InvalidInput("no clouds.yaml given or found (looked in "
                               f"{', '.join(map(str, search_path()))})", "--clouds-yaml")
        path = found[0]
    clouds = _clouds(path)
    if cloud not in clouds:
        raise InvalidInput(f"{path}: no cloud {cloud!r} (clouds in it: {', '.join(map(str, clouds)) or 'none'})",
                           "--cloud")
    entry = clouds[cloud]
    if not isinstance(entry, dict):
        raise InvalidInput(f"{path}: clouds.{cloud} is not a map", "--cloud")
    secure = path.with_name("secure.yaml")
    if secure.is_file():
        from undercloud.agent.apply import deep_merge  # here: only when there is a secure.yaml

        extra = _clouds(secure).get(cloud) or {}
        if not isinstance(extra, dict):
            raise InvalidInput(f"{secure}: clouds.{cloud} is not a map", "--cloud")
        entry = deep_merge(entry, extra)
    return entry, f"{path.resolve()} ({cloud})"


@click.group()
def cloud() -> None:
    """OpenStack clouds the undercloud can deploy onto, known by name (QuintupleO).

    \b
    A cloud is an entry of a clouds.yaml, as `openstack --os-cloud` reads it. When it is
    added the undercloud authenticates with it (openstacksdk) and needs compute (Nova) in
    its catalog; its credentials are then kept encrypted in the store and never shown.
    """


@cloud.command()
@click.argument("name")
@click.option("--clouds-yaml", metavar="FILE",
              help="The clouds.yaml to read (default: $OS_CLIENT_CONFIG_FILE, ./clouds.yaml, "
                   "~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml: the first found).")
@click.option("--cloud", "cloud_name", metavar="C", help="The entry to take (default: NAME).")
@formatted()
def add(name: str, clouds_yaml: str | None, cloud_name: str | None):
    """Add cloud NAME from an entry of a clouds.yaml; it must authenticate.

    \b
    undercloud cloud add host --clouds-yaml ~/overcloud/clouds.yaml --cloud overcloud
    undercloud cloud add mycloud            # the entry `mycloud` of the clouds.yaml found
    """
    entry, source = read_entry(clouds_yaml, cloud_name or name)
    return Client(timeout=120).post("/v1/clouds", json={"name": name, "config": entry, "source": source})


@cloud.command("list")
@formatted(COLUMNS)
def list_():
    """List the clouds (no secrets)."""
    return Client().get("/v1/clouds")


@cloud.command()
@click.argument("name")
@click.option("--check", is_flag=True, help="Authenticate again now and list its endpoints.")
@formatted()
def show(name: str, check: bool):
    """Show cloud NAME: its entry with every secret masked."""
    return Client(timeout=120).get(f"/v1/clouds/{name}", params={"check": "true"} if check else None)


@cloud.command()
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
def remove(names: tuple[str, ...]):
    """Forget clouds (nothing in the clouds themselves changes)."""
    client = Client()
    for name in names:
        client.delete(f"/v1/clouds/{name}")
        note(f"removed cloud {name}")
