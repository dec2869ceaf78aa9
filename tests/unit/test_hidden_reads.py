"""Hidden values masked in every read (issue 43): whatever gave a hidden parameter its value
(`-P`, an environment's `parameters` or `parameter_defaults`, a parent stack's property into a
nested stack's hidden parameter), neither it nor any value built from it shows in `stack show`,
outputs, resource lists and shows (attributes, properties, reasons) or events, on the engine,
the API and the CLI; what the engine and the deploy need still gets the real values."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from tests.conftest import run_cli
from tests.unit.test_engine_ops import Eng
from undercloud.cli.client import Client
from undercloud.errors import UndercloudError
from undercloud.masking import MASK, Mask, mask_text, mask_value
from undercloud.store.stacks import Stack, StackResource

CLI_SECRET = "cli-secret-1111"
DEFAULTS_SECRET = "defaults-secret-2121"
ENVPARAM_SECRET = "envparam-secret-3131"
JSON_SECRET = "json-pw-secret-4141"
DEFAULT_SECRET = "default-secret-6161"
SECRETS = (CLI_SECRET, DEFAULTS_SECRET, ENVPARAM_SECRET, JSON_SECRET, DEFAULT_SECRET)

TOP = """\
heat_template_version: 2018-08-31
parameters:
  p_cli: {type: string, hidden: true}
  p_defaults: {type: string, hidden: true}
  p_envparams: {type: string, hidden: true}
  p_json: {type: json, hidden: true}
  p_default: {type: string, hidden: true, default: default-secret-6161}
  plain: {type: string, default: visible-value}
resources:
  rand: {type: OS::Heat::RandomString, properties: {length: 24}}
  joined:
    type: OS::Heat::Value
    properties:
      value: {str_replace: {template: "https://admin:PW@host/", params: {PW: {get_param: p_defaults}}}}
  kids:
    type: inner.yaml
    properties:
      from_parent: {get_attr: [rand, value]}
      also: {list_join: ['-', [pre, {get_param: p_cli}]]}
outputs:
  whole: {value: {get_param: p_defaults}}
  built: {value: {list_join: [':', [{get_param: p_envparams}, x]]}}
  listed: {value: [{get_param: p_cli}, {k: {get_param: p_defaults}}]}
  json: {value: {get_param: p_json}}
  nested: {value: {get_attr: [kids, echoed]}}
  joined: {value: {get_attr: [joined, value]}}
  plain: {value: {get_param: plain}}
  from_default: {value: {get_param: p_default}}
  failing: {value: {yaql: {expression: "$.data.x.foo()", data: {x: {get_param: p_defaults}}}}}
"""
INNER = """\
heat_template_version: 2018-08-31
parameters:
  from_parent: {type: string, hidden: true}
  also: {type: string}
resources:
  v: {type: OS::Heat::Value, properties: {value: {get_param: from_parent}}}
  w: {type: OS::Heat::Value, properties: {value: {get_param: also}}}
outputs:
  echoed: {value: {str_replace: {template: "token=T;", params: {T: {get_param: from_parent}}}}}
"""
ENV = f"""\
parameters:
  p_envparams: {ENVPARAM_SECRET}
parameter_defaults:
  p_defaults: {DEFAULTS_SECRET}
  p_json: {{user: admin, password: {JSON_SECRET}}}
"""
MASKED_OUTPUTS = {
    "whole": MASK, "built": f"{MASK}:x", "listed": [MASK, {"k": MASK}],
    "json": {"user": "admin", "password": MASK},  # strings under 6 characters stay (json rule)
    "nested": f"token={MASK};", "joined": f"https://admin:{MASK}@host/", "plain": "visible-value",
    "from_default": MASK, "failing": None,
}


def forms(secret: str) -> list[str]:
    return [secret, json.dumps(secret)[1:-1]]


def assert_masked(text: str, extra: tuple[str, ...] = ()) -> None:
    for s in SECRETS + extra:
        for f in forms(s):
            assert f not in text, f"{f!r} shows"


def files(d):
    (d / "top.yaml").write_text(TOP)
    (d / "inner.yaml").write_text(INNER)
    (d / "env.yaml").write_text(ENV)


def random_value(store) -> str:
    """The RandomString's value as stored (what get_attr hands on): the engine's own read."""
    with store.engine.connect() as conn:
        attrs = conn.execute(select(StackResource.__table__.c.attributes)
                             .where(StackResource.__table__.c.name == "rand")).scalar()
    return attrs["value"]


@pytest.fixture
def eng(tmp_path):
    return Eng(tmp_path)


def engine_reads(eng: Eng, name: str) -> str:
    svc = eng.svc
    parts = {"show": svc.show(name), "outputs": svc.outputs(name), "resources": svc.resources(name, 5),
             "events": svc.events(name)}
    parts["each"] = [svc.resource(name, r["path"]) for r in parts["resources"]]
    return json.dumps(parts)


def test_every_source_and_every_read_of_the_engine(eng, tmp_path):
    from undercloud.orchestration.template import Bundle

    files(tmp_path)
    b = Bundle.from_paths(str(tmp_path / "top.yaml"), env_paths=[str(tmp_path / "env.yaml")]).to_json()
    s = eng.create("s", b, {"p_cli": CLI_SECRET})
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    rand = random_value(eng.store)  # a parent's resource into a nested stack's hidden parameter
    text = engine_reads(eng, "s")
    assert_masked(text, (rand,))
    outputs = {o["output_key"]: o for o in eng.svc.outputs("s")}
    assert {k: o["output_value"] for k, o in outputs.items()} == MASKED_OUTPUTS
    assert outputs["failing"]["output_error"].endswith(f'Unknown method "foo" for receiver {MASK}')
    assert eng.svc.show("s")["parameters"] == {"p_cli": MASK}
    joined = eng.svc.resource("s", "joined")
    assert joined["attributes"] == {"value": f"https://admin:{MASK}@host/"}
    assert joined["properties"]["value"] == f"https://admin:{MASK}@host/"
    kids = eng.svc.resource("s", "kids")
    assert kids["properties"] == {"from_parent": MASK, "also": f"pre-{MASK}"}
    assert eng.svc.resource("s", "kids.v")["attributes"] == {"value": MASK}
    assert eng.svc.resource("s", "kids.w")["properties"] == {"value": f"pre-{MASK}"}
    # the engine itself still has the values: stored (encrypted at rest) and resolved by get_attr
    with eng.store.engine.connect() as conn:
        stored = conn.execute(select(Stack.__table__.c.outputs).where(Stack.__table__.c.name == "s")).scalar()
        v = conn.execute(select(StackResource.__table__.c.attributes)
                         .where(StackResource.__table__.c.name == "v")).scalar()
    assert stored["nested"]["value"] == f"token={rand};" and stored["whole"]["value"] == DEFAULTS_SECRET
    assert v == {"value": rand}


def test_a_rotated_secret_stays_masked_and_the_new_one_too(eng, tmp_path):
    """An update through an inline environment (Heat's PATCH): the old value may still be in
    events and rows of the stack; both are masked."""
    from undercloud.orchestration.template import Bundle

    files(tmp_path)
    b = Bundle.from_paths(str(tmp_path / "top.yaml"), env_paths=[str(tmp_path / "env.yaml")]).to_json()
    eng.create("s", b, {"p_cli": CLI_SECRET})
    s = eng.update("s", None, {}, existing=True,
                   environment={"parameter_defaults": {"p_defaults": "rotated-secret-5151"}})
    assert s["stack_status"] == "UPDATE_COMPLETE", s["stack_status_reason"]
    assert_masked(engine_reads(eng, "s"), ("rotated-secret-5151", random_value(eng.store)))
    assert {o["output_key"]: o["output_value"] for o in eng.svc.outputs("s")}["whole"] == MASK


FAILING = """\
heat_template_version: 2018-08-31
parameters:
  p: {type: string, hidden: true}
resources:
  rand: {type: OS::Heat::RandomString, properties: {length: 12}}
  kid:
    type: inner.yaml
    properties: {q: {list_join: ['-', [{get_param: p}, {get_attr: [rand, value]}]]}}
"""
FAILING_INNER = """\
heat_template_version: 2018-08-31
parameters:
  q: {type: string, constraints: [{allowed_values: [only-this]}]}
"""


def test_errors_and_status_reasons_are_masked(eng, tmp_path):
    """A nested stack refusing a value built from a hidden one (known only at run time): the
    resource's and the stack's reasons, and the events, mask it; a refusal at validation too."""
    from undercloud.orchestration.template import Bundle, TemplateError

    (tmp_path / "top.yaml").write_text(FAILING)
    (tmp_path / "inner.yaml").write_text(FAILING_INNER)
    (tmp_path / "env.yaml").write_text(f"parameter_defaults: {{p: {DEFAULTS_SECRET}}}\n")
    b = Bundle.from_paths(str(tmp_path / "top.yaml"), env_paths=[str(tmp_path / "env.yaml")]).to_json()
    s = eng.create("s", b)
    assert s["stack_status"] == "CREATE_FAILED"
    assert "allowed" in s["stack_status_reason"] and MASK in s["stack_status_reason"]
    text = engine_reads(eng, "s")
    assert_masked(text)
    assert MASK in eng.svc.resource("s", "kid")["resource_status_reason"]
    # known at validation: the create is refused in one line, the value masked
    (tmp_path / "top.yaml").write_text(FAILING.replace("{get_attr: [rand, value]}", "tail"))
    b = Bundle.from_paths(str(tmp_path / "top.yaml"), env_paths=[str(tmp_path / "env.yaml")]).to_json()
    with pytest.raises(TemplateError) as e:
        eng.svc.create("t", b, {})
    assert MASK in str(e.value) and DEFAULTS_SECRET not in str(e.value)


def test_the_masking_helper():
    m = Mask({"secret-abc", "secret-abcdef"})
    assert m.text("a secret-abcdef b secret-abc") == f"a {MASK} b {MASK}"  # the longer first
    assert m.text("cut at secret-ab…") == f"cut at {MASK}…"  # a value cut to a limit
    assert m.value({"k secret-abc": [1, "x secret-abc", {"n": None}], "t": True}) == \
        {f"k {MASK}": [1, f"x {MASK}", {"n": None}], "t": True}
    assert mask_value(4711, {"4711"}) == MASK and mask_value(True, {"True"}) is True
    assert mask_text("nothing here", set()) == "nothing here" and not Mask()


def test_api_and_cli_reads(uc_home, tmp_path):
    """The same stack through the real service: the API's reads and the CLI's `-f json`."""
    files(tmp_path)
    r = run_cli("stack", "create", "s", "-t", str(tmp_path / "top.yaml"), "-e", str(tmp_path / "env.yaml"),
                "-P", f"p_cli={CLI_SECRET}", "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert_masked(r.stdout + r.stderr)
    cli = [r.stdout]
    for args in (("stack", "show", "s"), ("stack", "output", "show", "s", "--all"),
                 ("stack", "output", "show", "s", "nested"), ("stack", "output", "list", "s"),
                 ("stack", "resource", "list", "s", "--nested-depth", "2"), ("stack", "event", "list", "s"),
                 ("stack", "resource", "show", "s", "joined"), ("stack", "resource", "show", "s", "kids"),
                 ("stack", "resource", "show", "s", "kids.v"), ("stack", "resource", "show", "s", "rand")):
        r = run_cli(*args, "-f", "json")
        assert r.returncode == 0, (args, r.stderr)
        cli.append(r.stdout)
    outputs = {o["output_key"]: o["output_value"] for o in json.loads(cli[2])}
    assert outputs == MASKED_OUTPUTS
    assert json.loads(cli[3])["output_value"] == f"token={MASK};"
    assert json.loads(cli[8])["properties"] == {"from_parent": MASK, "also": f"pre-{MASK}"}

    api = Client()  # the API itself, as any client reads it
    rows = api.get("/v1/stacks/s/resources", params={"nested_depth": 3})
    reads = [api.get("/v1/stacks/s"), api.get("/v1/stacks/s/outputs"), api.get("/v1/stacks/s/events"), rows]
    reads += [api.get(f"/v1/stacks/s/resources/{r['path']}") for r in rows]
    assert reads[0]["parameters"] == {"p_cli": MASK}
    assert {o["output_key"]: o["output_value"] for o in reads[1]} == MASKED_OUTPUTS
    assert len(rows) == 5 and any(e["resource_name"] == "kids.v" for e in reads[2])
    assert_masked("\n".join(cli) + json.dumps(reads))

    # a failure: the CLI's one line, the stack's and the resource's reasons, the events
    (tmp_path / "top.yaml").write_text(FAILING)
    (tmp_path / "inner.yaml").write_text(FAILING_INNER)
    (tmp_path / "env.yaml").write_text(f"parameter_defaults: {{p: {DEFAULTS_SECRET}}}\n")
    r = run_cli("stack", "create", "bad", "-t", str(tmp_path / "top.yaml"), "-e", str(tmp_path / "env.yaml"),
                "--wait", "-f", "json")
    assert r.returncode == 1 and "CREATE_FAILED" in r.stderr and MASK in r.stderr.strip().splitlines()[-1]
    texts = [r.stdout + r.stderr]
    for args in (("stack", "show", "bad"), ("stack", "event", "list", "bad", "--nested-depth", "2"),
                 ("stack", "resource", "show", "bad", "kid")):
        r = run_cli(*args, "-f", "json")
        assert r.returncode == 0, (args, r.stderr)
        texts.append(r.stdout)
    assert MASK in json.loads(texts[3])["resource_status_reason"]
    texts += [json.dumps(api.get("/v1/stacks/bad")), json.dumps(api.get("/v1/stacks/bad/events")),
              json.dumps(api.get("/v1/stacks/bad/resources/kid"))]
    assert_masked("\n".join(texts))


OVERCLOUD = """\
heat_template_version: 2018-08-31
parameters:
  AdminPassword: {type: string, hidden: true}
resources:
  EndpointMap:
    type: OS::Heat::Value
    properties: {value: {keystone: "http://192.0.2.10:5000", nova: "http://192.0.2.10:8774/v2.1"}}
outputs:
  VirtualIP: {value: 192.0.2.10}
  EndpointMap: {value: {get_attr: [EndpointMap, value]}}
  AdminUrl: {value: {str_replace: {template: "http://admin:PW@192.0.2.10:5000", params: {PW: {get_param: AdminPassword}}}}}
"""


def test_the_deploys_reads_still_get_what_they_need(uc_home, tmp_path):
    """`undercloud deploy` and `overcloud` read outputs (EndpointMap, VirtualIP, RoleNodes...)
    and take the admin password from the overcloud's own secret store: masking leaves those
    outputs whole, and clouds.yaml still carries the real password."""
    from undercloud.cli import deploy as cli_deploy
    from undercloud.cli import overcloud as cli_overcloud
    from undercloud.overcloud.state import StackState

    password = "Adm1nPassw0rdFromTheStore24"
    (tmp_path / "t.yaml").write_text(OVERCLOUD)
    (tmp_path / "secrets.yaml").write_text(f"parameter_defaults: {{AdminPassword: {password}}}\n")
    r = run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "-e", str(tmp_path / "secrets.yaml"),
                "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr
    client = Client()
    StackState(client, "overcloud").secrets({"AdminPassword": "password"}, {"AdminPassword": password})
    for read in (cli_deploy.outputs, cli_overcloud._outputs):
        out = read(client, "overcloud")
        assert out["EndpointMap"] == {"keystone": "http://192.0.2.10:5000", "nova": "http://192.0.2.10:8774/v2.1"}
        assert out["VirtualIP"] == "192.0.2.10"
        assert out["AdminUrl"] == f"http://admin:{MASK}@192.0.2.10:5000"
    r = run_cli("overcloud", "clouds-yaml", "--stack", "overcloud")
    assert r.returncode == 0, r.stderr
    assert f"password: {password}" in r.stdout and "auth_url: http://192.0.2.10:5000" in r.stdout
    r = run_cli("stack", "output", "show", "overcloud", "--all", "-f", "json")
    assert password not in r.stdout
    with pytest.raises(UndercloudError):
        cli_deploy.outputs(client, "missing")
