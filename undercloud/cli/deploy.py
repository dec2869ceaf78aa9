"""`undercloud deploy`: deploy (or update) the overcloud from roles and the service library.

The deploy itself is a workflow the service runs (overcloud/workflows.py, api/workflows.py):
this command checks what it can refuse at once, starts the workflow (or attaches to the one
running with the same input) and prints its lines as they come; killing it stops nothing."""

from __future__ import annotations

import click

from undercloud.cli.client import Client
from undercloud.cli.output import emit, format_option, note
from undercloud.server_types import CONTAINER, HYPERVISOR_TYPES, OPENSTACK


class _Console:
    """The workflow's sink when the CLI calls one of its steps itself."""

    note = staticmethod(note)

    @staticmethod
    def echo(text: str) -> None:
        click.echo(text)


def check_hypervisor(_ctx, _param, value: str) -> str:
    from undercloud.overcloud.plan import HYPERVISOR_FLAVORS, node_cloud

    if value in HYPERVISOR_FLAVORS or node_cloud(value):
        return value
    raise click.BadParameter(f"{value!r}: one of {', '.join(HYPERVISOR_FLAVORS)}, or openstack:<cloud> "
                             f"(a cloud of `undercloud cloud list`)")


def power_on_stopped(client: Client, drift: list[dict]) -> None:
    from undercloud.overcloud import workflows

    workflows.power_on_stopped(client, _Console, drift)


def outputs(client: Client, stack: str) -> dict:
    from undercloud.overcloud import workflows

    return workflows.outputs(client, stack)


@click.command()
@click.option("--example", type=click.Choice(["minimal", "ha", "hypervisor-host"]),
              help="A shipped example: minimal (a controller with every control-plane service and a "
                   "compute node; the default when neither --roles nor -e is given), ha (three "
                   "controllers behind haproxy, their MariaDBs a Galera cluster and their RabbitMQs a "
                   "cluster, and a compute node) or hypervisor-host (a node that becomes a hypervisor "
                   "host of this undercloud for container servers; needs a PostgreSQL store, given as "
                   "UndercloudStoreUrl in an environment).")
@click.option("--roles", type=click.Path(dir_okay=False), help="Your roles_data.yaml (TripleO format).")
@click.option("-e", "--environment", "environments", multiple=True, type=click.Path(dir_okay=False),
              help="An environment file (parameter_defaults such as ControllerCount, resource_registry "
                   "mapping a service to OS::Heat::None...); repeat to merge several, in order. A "
                   "path not found here is looked up in the undercloud's library: "
                   "-e environments/tls-everywhere.yaml turns TLS on inside the overcloud; "
                   "-e environments/release-2025.1.yaml deploys OpenStack 2025.1 (Debian 13's "
                   "packages, Neutron on Open vSwitch) instead of zed (OvercloudRelease; an overcloud "
                   "keeps its release).")
@click.option("--hypervisor", default=CONTAINER, show_default=True, callback=check_hypervisor,
              metavar="|".join((*HYPERVISOR_TYPES[::-1], f"{OPENSTACK}:CLOUD")),  # container|vm|baremetal|openstack:CLOUD
              help="How nodes are realised (the flavor of every role). openstack:CLOUD: servers of "
                   "that cloud (`undercloud cloud add`), on its network OvercloudNetwork, with its "
                   "flavor Overcloud<Role>Flavor (default m1.small), both set in an environment.")
@click.option("--stack", default="overcloud", show_default=True, help="The stack's name.")
@click.option("--timeout", type=float, default=60, show_default=True, metavar="MINUTES",
              help="Fail what is still in progress after this long.")
@click.option("-y", "--yes", is_flag=True,
              help="Scale-in: delete the instances on the compute nodes being removed (without it, a "
                   "removal that would take instances with it is refused, naming them).")
@click.option("--dry-run", is_flag=True,
              help="Show what the deploy would change, per node and service (image, a diff of the "
                   "rendered config files with secrets masked, restart or not, nodes added or "
                   "removed), and change nothing: no image built, no stack update.")
@format_option
def deploy(example, roles, environments, hypervisor, stack, timeout, yes, dry_run, fmt):
    """Deploy the overcloud, or bring it to what the roles and environments now say.

    Builds the images that are missing (node image, one image per service the roles run),
    renders the overcloud templates from the roles (TripleO's roles_data.yaml: per role a
    group of servers, its services and deploy steps 1..5) and what each service template
    declares (databases, Keystone entries, endpoints, haproxy frontends, secrets), then
    creates or updates the stack.
    Progress per role, step and service goes to stderr; a step starts only when the
    previous one is healthy on every node. At the end: the endpoints (stdout) and the path
    of a generated clouds.yaml. Before anything else it checks every service of a deployed
    stack (as `overcloud status`): one not healthy (stopped, missing, failing its check)
    makes every step run again, which starts or re-creates what drifted and says what it
    repaired. Run again with no change and every service healthy, it does nothing and says so.
    The deploy runs in the service: interrupting this command stops nothing, and the
    same command again follows it (the same input; another input is refused while it runs).
    Scale-in (a lower <Role>Count, removal_policies): the nodes to remove are found first;
    a compute node's instances are refused (named) unless --yes, which deletes them, then
    its nova-compute service record, then the node.

    \b
    Examples:
      undercloud deploy                          # the `minimal` example, container nodes
      undercloud deploy --example ha
      undercloud deploy -e environments/release-2025.1.yaml --stack epoxy   # OpenStack 2025.1
      undercloud deploy --example hypervisor-host --stack hosts --hypervisor vm -e store.yaml
          # store.yaml: {parameter_defaults: {UndercloudStoreUrl: postgresql://...}}
      undercloud deploy --roles my_roles.yaml -e counts.yaml   # e.g. {ComputeCount: 2}
      undercloud deploy -e one-compute.yaml --yes   # scale in, deleting the removed node's instances
      undercloud deploy -e tuned.yaml --dry-run     # what would change, and nothing changes
      openstack --os-cloud overcloud server list   # with OS_CLIENT_CONFIG_FILE=<path shown>
      undercloud deploy --hypervisor openstack:host --stack inner -e inner.yaml
          # nodes are servers of cloud `host`; inner.yaml: {parameter_defaults:
          #   {OvercloudNetwork: lab, OvercloudControllerFlavor: m1.small, ...}}
    """
    from undercloud.cli import workflows as wf
    from undercloud.overcloud.workflows import check_deploy, deploy_input

    if fmt != "table" and not dry_run:
        raise click.UsageError("-f/--format is for --dry-run's rows")
    given = deploy_input(example, roles, environments, hypervisor, timeout, yes)
    # What can be refused here is refused before the service is asked anything (or started).
    check_deploy(stack, {**given, "roles": roles, "environments": list(environments)})  # as given
    if dry_run:  # the rows for scripts; the workflow prints the text itself
        given.update(dry_run=True, rows_only=fmt != "table")
    result = wf.run(Client(timeout=600), stack, "deploy", given)
    if dry_run and fmt != "table":
        emit((result or {}).get("rows") or [], fmt, DRY_RUN_COLUMNS)


DRY_RUN_COLUMNS = ["node", "role", "service", "change", "restart", "image_before", "image_after", "diff"]
