"""`undercloud deploy --dry-run`: the engine's dry run of an update gives the resolved
properties it would change (hidden values masked), and overcloud/dryrun.py turns them into
rows per node and service, "restart" decided by the agent's own Pod digest. Real engine
in-process, the library's real memcached template beside a small service whose config
holds a secret; the nodes are names (no servers)."""

from __future__ import annotations

import json
import shutil

import pytest
from sqlalchemy import select

from tests.conftest import run_cli
from tests.unit.service_support import SERVICES
from tests.unit.test_engine_ops import Eng
from undercloud.agent.pod_spec import pod_digest
from undercloud.masking import MASK, Mask
from undercloud.overcloud import dryrun
from undercloud.store.stacks import Stack, StackEvent, StackResource

SECRET = "pw-5f3a9c1e77"

DB = """\
heat_template_version: wallaby
parameters:
  DbPassword: {type: string}
  DbPort: {type: number, default: 3306}
  ContainerDbImage: {type: string}
resources:
  ConfigFiles:
    type: OS::Heat::Value
    properties:
      type: json
      value:
        db.ini:
          str_replace:
            template: "[db]\\nport = PORT\\npassword = PASS\\n"
            params: {PORT: {get_param: DbPort}, PASS: {get_param: DbPassword}}
  Pod:
    type: OS::Heat::Value
    properties:
      type: json
      value:
        apiVersion: v1
        kind: Pod
        metadata: {name: db}
        spec:
          containers: [{name: db, image: {get_param: ContainerDbImage}}]
          volumes: [{name: config, configMap: {name: db-config}}]
"""

ROOT = """\
heat_template_version: wallaby
parameters:
  DbPassword: {type: string, hidden: true}
  ComputeCount: {type: number, default: 1}
  ComputeDbPort: {type: number, default: 3306}
resources:
  ControllerMemcached: {type: memcached.yaml}
  ControllerDb: {type: db.yaml}
  ComputePort:
    type: OS::Heat::TestResource
    properties: {value: {get_param: ComputeDbPort}}
  ComputeDb:
    type: db.yaml
    properties: {DbPort: {get_attr: [ComputePort, output]}}
  ComputeServers:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: ComputeCount}
      resource_def: {type: OS::Heat::TestResource}
"""

RESOURCES = {"ControllerMemcached": ("Controller", "memcached"), "ControllerDb": ("Controller", "db"),
             "ComputeDb": ("Compute", "db")}
NODES = {"Controller": ["ctl-0", "ctl-1"], "Compute": ["cmp-0"]}


class Cloud(Eng):
    def __init__(self, tmp_path):
        super().__init__(tmp_path)
        shutil.copy(SERVICES / "memcached.yaml", tmp_path / "memcached.yaml")
        self.write("db.yaml", DB)
        self.write("overcloud.yaml", ROOT)

    def bundle_with(self, **defaults) -> dict:
        from undercloud.orchestration.template import Bundle

        env = {"parameter_defaults": {"ContainerMemcachedImage": "memcached:1", "ContainerDbImage": "db:1",
                                      "DbPassword": SECRET, **defaults}}
        path = self.write("env.yaml", json.dumps(env))
        return Bundle.from_paths(str(self.dir / "overcloud.yaml"), [path]).to_json()

    def dry(self, **defaults) -> list[dict]:
        plan = self.svc.update("overcloud", self.bundle_with(**defaults), {"DbPassword": SECRET}, dry_run=True)
        return dryrun.rows(plan, RESOURCES, NODES, {}, self.now, Mask([SECRET]))

    def now(self, path: str):
        return self.svc.resource("overcloud", path)["properties"]

    def store_rows(self) -> list:
        with self.store.engine.connect() as c:
            return [sorted(map(tuple, c.execute(select(t)).all()), key=repr) for t in (Stack, StackResource, StackEvent)]

    def digests(self) -> dict[str, str]:
        """resource -> the agent's digest of its Pod as the node runs it now (the stored
        values themselves: reads mask the hidden ones)."""
        with self.store.engine.connect() as c:
            found = c.execute(select(Stack.name, StackResource.name, StackResource.properties)
                              .join(Stack, Stack.id == StackResource.stack_id)
                              .where(StackResource.name.in_(["Pod", "ConfigFiles"]))).all()
        values = {(stack.removeprefix("overcloud-"), name): props["value"] for stack, name, props in found}
        out = {}
        for head in RESOURCES:
            pod, files = values[head, "Pod"], values[head, "ConfigFiles"]
            out[head] = pod_digest(pod, {f"{pod['metadata']['name']}-config": files})
        return out


@pytest.fixture
def cloud(tmp_path):
    c = Cloud(tmp_path)
    c.create("overcloud", c.bundle_with(), {"DbPassword": SECRET})
    assert c.svc.show("overcloud")["stack_status"] == "CREATE_COMPLETE"
    return c


def test_one_services_parameter_names_that_service_on_its_nodes_with_the_diff(cloud):
    rows = cloud.dry(MemcachedMaxMemory="128")
    assert [(r["node"], r["service"], r["change"], r["restart"]) for r in rows] == [
        ("ctl-0", "memcached", "config", True), ("ctl-1", "memcached", "config", True)]
    diff = rows[0]["diff"]
    assert '-    "64"\n' in diff and '+    "128"\n' in diff and "a/memcached/config.json" in diff
    assert rows[0]["image_before"] == rows[0]["image_after"] == "memcached:1"
    text = "\n".join(dryrun.lines(rows))
    assert "ctl-0 (Controller): memcached: config changes; restart" in text and "cmp-0" not in text


def test_the_update_that_follows_restarts_exactly_what_the_dry_run_said(cloud):
    rows = cloud.dry(MemcachedMaxMemory="128", ContainerDbImage="db:2")
    said = {(r["role"], r["service"]) for r in rows if r["restart"]}
    before = cloud.digests()
    cloud.update("overcloud", cloud.bundle_with(MemcachedMaxMemory="128", ContainerDbImage="db:2"),
                 {"DbPassword": SECRET})
    after = cloud.digests()
    replaced = {RESOURCES[h] for h in RESOURCES if before[h] != after[h]}
    assert said == replaced == {("Controller", "memcached"), ("Controller", "db"), ("Compute", "db")}
    db = next(r for r in rows if r["node"] == "cmp-0")
    assert (db["change"], db["image_before"], db["image_after"]) == ("image", "db:1", "db:2")


def test_a_secret_in_a_changed_file_is_masked(cloud):
    rows = cloud.dry(DbPort=3307)
    # the compute role's db takes its port from a resource of its own
    assert sorted(r["node"] for r in rows) == ["ctl-0", "ctl-1"] and {r["service"] for r in rows} == {"db"}
    diff = rows[0]["diff"]
    assert "-port = 3306" in diff and "+port = 3307" in diff
    assert SECRET not in json.dumps(rows) and MASK in diff
    # the engine's answer itself masks it too, whoever asks
    plan = cloud.svc.update("overcloud", cloud.bundle_with(DbPort=3307), {"DbPassword": SECRET}, dry_run=True)
    assert SECRET not in json.dumps(plan) and plan["changes"]["ControllerDb.ConfigFiles"]["after"]


def test_a_count_change_adds_nodes_and_nothing_else(cloud):
    rows = cloud.dry(ComputeCount=2)
    assert [(r["node"], r["role"], r["change"]) for r in rows] == [("ComputeServers.1", "Compute", "added")]
    removed = dryrun.rows({"changes": {}}, RESOURCES, NODES, {"cmp-0": "Compute"}, cloud.now, Mask())
    assert [(r["node"], r["change"]) for r in removed] == [("cmp-0", "removed")]


def test_nothing_changed_says_so_and_a_dry_run_writes_nothing(cloud):
    before = cloud.store_rows()
    assert cloud.dry() == []
    assert dryrun.lines([]) == ["nothing would change"]
    cloud.dry(MemcachedMaxMemory="128", DbPort=1, ComputeCount=3)
    assert cloud.store_rows() == before


def test_rows_have_one_shape_for_scripts(cloud):
    rows = cloud.dry(MemcachedMaxMemory="128", ComputeCount=2)
    assert rows and all(set(r) == {"node", "role", "service", "change", "restart", "image_before", "image_after",
                                   "diff"} for r in rows)
    json.dumps(rows)


@pytest.mark.parametrize("args, message", [
    (["-e", "{tmp}/missing.yaml"], "missing.yaml: environment file not found"),
    (["-f", "json"], "-f/--format is for --dry-run's rows"),
])
def test_dry_run_bad_input_is_one_line(uc_home, tmp_path, args, message):
    r = run_cli("deploy", "--dry-run" if "-e" in args else "--stack=overcloud", *[a.format(tmp=tmp_path) for a in args])
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert len([x for x in r.stderr.splitlines() if x.strip()]) <= 3, r.stderr  # click's usage lines at most


def test_the_deploy_command_offers_dry_run_and_json():
    r = run_cli("deploy", "--help")
    assert "--dry-run" in r.stdout and "--format" in r.stdout




def test_a_dry_run_of_a_stack_not_deployed_builds_nothing_and_says_so(uc_home):
    r = run_cli("deploy", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "stack overcloud: not deployed yet: a deploy would create it\n"
    assert "images: would build service-memcached" in r.stderr
    j = run_cli("deploy", "--dry-run", "-f", "json")
    assert j.returncode == 0 and json.loads(j.stdout) == [], j.stderr
    for what in (["image", "list"], ["stack", "list"]):
        listed = run_cli(*what, "-f", "json")
        assert listed.returncode == 0 and json.loads(listed.stdout or "[]") == [], (what, listed.stdout)


def test_without_the_library_services_are_named_by_their_pod(cloud):
    """`overcloud update --dry-run` has no library at hand: the role by its name, the
    service by its Pod's."""
    plan = cloud.svc.update("overcloud", cloud.bundle_with(ContainerDbImage="db:2"), {"DbPassword": SECRET},
                            dry_run=True)
    rows = dryrun.rows(plan, None, NODES, {}, cloud.now, Mask([SECRET]))
    assert [(r["node"], r["role"], r["service"], r["change"], r["restart"]) for r in rows] == [
        ("cmp-0", "Compute", "db", "image", True), ("ctl-0", "Controller", "db", "image", True),
        ("ctl-1", "Controller", "db", "image", True)]


@pytest.mark.parametrize("args, message", [
    (["--dry-run"], "no overcloud stack 'overcloud': run `undercloud deploy`"),
    (["-f", "json"], "-f/--format is for --dry-run's rows"),
])
def test_update_dry_run_bad_input_is_one_line(uc_home, args, message):
    r = run_cli("overcloud", "update", *args)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_the_plan_rendered_aside_is_the_deploys_bundle(tmp_path):
    """The dry run renders its plan in a temporary directory; its bundle must be the one the
    deploy sends (a nested template named otherwise would be a type change: every service
    replaced, and the dry run blind)."""
    from undercloud.orchestration.template import Bundle
    from undercloud.overcloud import plan as op
    from undercloud.overcloud import roles as oroles
    from undercloud.overcloud.workflows import plan_bundle_aside

    roles = oroles.load_roles(oroles.roles_file_for("minimal", None))
    lib = op.resolve(roles, op.environments_for("minimal", []))
    images = {**{p: f"{n}:1" for p, n in lib.images().items()}, "ServiceImageSources": {}}
    secrets = {k: f"secret-{k}" for k in lib.secrets()}
    args = (roles, lib, images, "container", "minimal", [], secrets)
    plan = op.render(tmp_path / "home", "overcloud", *args)
    deployed = Bundle.from_paths(str(plan.template), env_paths=[str(e) for e in plan.environments]).to_json()
    assert plan_bundle_aside(tmp_path / "home", "overcloud", *args) == deployed
    other = plan_bundle_aside(tmp_path / "elsewhere", "overcloud", *args)
    assert other != deployed  # the comparison can fail


def test_a_changed_secret_restarts_its_services_and_shows_as_masked(cloud):
    new = "pw-0b81d2e4aa"
    plan = cloud.svc.update("overcloud", cloud.bundle_with(DbPassword=new), {"DbPassword": new}, dry_run=True)
    rows = dryrun.rows(plan, RESOURCES, NODES, {}, cloud.now, Mask([SECRET, new]))
    assert [(r["node"], r["service"], r["change"], r["restart"]) for r in rows] == [
        ("cmp-0", "db", "secret", True), ("ctl-0", "db", "secret", True), ("ctl-1", "db", "secret", True)]
    assert SECRET not in json.dumps(rows) and new not in json.dumps(rows)
    before = cloud.digests()
    cloud.update("overcloud", cloud.bundle_with(DbPassword=new), {"DbPassword": new})
    after = cloud.digests()
    assert {RESOURCES[h] for h in RESOURCES if before[h] != after[h]} == {("Controller", "db"), ("Compute", "db")}


def test_a_service_whose_inputs_change_with_the_update_is_named_restart_unknown(cloud):
    rows = cloud.dry(ComputeDbPort=3400)
    assert [(r["node"], r["service"], r["change"], r["restart"]) for r in rows] == [
        ("cmp-0", "db", "inputs from ComputePort", None)]
    assert dryrun.lines(rows) == ["cmp-0 (Compute): db: may change with its inputs from ComputePort "
                                  "(known once they change): restart unknown"]
