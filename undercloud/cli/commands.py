"""The command groups of the `undercloud` command, one module each, imported only when that
command runs: `undercloud --help` shows the first paragraph of each one's help kept here (a
test keeps it equal to the command's own), so listing them imports none of them."""

from __future__ import annotations

import importlib

import click

# name -> (module, attribute holding the click group/command, first paragraph of its help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "agent": ("undercloud.cli.agent", "agent", "Agents on servers: list them, or issue a configuration for one."),
    "cloud": ("undercloud.cli.cloud", "cloud",
              "OpenStack clouds the undercloud can deploy onto, known by name (QuintupleO)."),
    "deploy": ("undercloud.cli.deploy", "deploy",
               "Deploy the overcloud, or bring it to what the roles and environments now say."),
    "flavor": ("undercloud.cli.flavor", "flavor",
               "Flavors: the size of a server (vCPUs, RAM, disk) and how it is realised."),
    "image": ("undercloud.cli.image", "image", "The image store and the image builder."),
    "lab": ("undercloud.cli.lab", "lab",
            "The virtual lab: libvirt VMs with virtual BMCs (Redfish or IPMI) to enrol as nodes."),
    "node": ("undercloud.cli.node", "node",
             "Enrol machines and manage their lifecycle, power and boot device (like Ironic)."),
    "overcloud": ("undercloud.cli.overcloud", "overcloud",
                  "The overcloud that `undercloud deploy` made: credentials, status, rolling update and "
                  "rollback of its service images, replacing a failed node, delete."),
    "serve": ("undercloud.cli.service", "serve", "Run the undercloud service in the foreground (for systemd or debugging)."),
    "server": ("undercloud.cli.server", "server", "Servers: what an OS::Nova::Server resource of a stack becomes."),
    "service": ("undercloud.cli.service", "service",
                "Start, stop and inspect the undercloud service (API, engine, background loops)."),
    "stack": ("undercloud.cli.stack", "stack", "Create, update and delete stacks of resources from HOT templates."),
    "template": ("undercloud.cli.template", "template", "Work with HOT templates (Heat Orchestration Templates)."),
    "workflow": ("undercloud.cli.workflows", "workflow",
                 "The overcloud's workflows the service runs: list them, show one, follow its lines."),
}


def load(name: str) -> click.Command | None:
    entry = COMMANDS.get(name)
    return getattr(importlib.import_module(entry[0]), entry[1]) if entry else None
