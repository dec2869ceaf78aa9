"""`undercloud agent`: the servers whose agents poll this undercloud, and their configs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from undercloud.agent.files import write_atomic
from undercloud.cli.client import Client
from undercloud.cli.output import formatted, note


@click.group()
def agent():
    """Agents on servers: list them, or issue a configuration for one.

    Every server the undercloud configures (OS::Heat::DeployedServer, OS::Nova::Server)
    has an id and a token; its agent (`python3 -m undercloud.agent run --config FILE`)
    polls its metadata and signals its deployments with them.
    """


@agent.command("list")
@formatted(columns=["id", "name", "deployments", "signalled", "last_seen"])
def list_agents():
    """Servers with agent credentials: deployments published and signalled, last poll."""
    rows = Client().get("/v1/agent/servers")
    for r in rows:
        if r.get("last_seen"):
            r["last_seen"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["last_seen"]))
        r.pop("etag", None)
    return rows


@agent.command("config")
@click.argument("server")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File to write the agent configuration to (mode 600; it holds the token).")
def config(server: str, output: Path):
    """Write a new agent configuration for SERVER (id or name) to a file.

    Issues a new token: the agent still using the previous one is refused from now on.
    Copy the file to the machine and run `python3 -m undercloud.agent run --config FILE`.
    The token never goes to the terminal.
    """
    data = Client().post(f"/v1/agent/servers/{server}/credentials")
    write_atomic(output, json.dumps(data, indent=2, sort_keys=True))
    note(f"wrote the agent configuration of {data['name'] or data['server_id']} to {output} "
         f"(the previous token no longer works)")
