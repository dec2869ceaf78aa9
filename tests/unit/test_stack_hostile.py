"""Hostile stacks sent straight to a running service (as a user bypassing the CLI would): each
is refused in one line or fails its stack in one line, no hidden value reaches what the
service shows or logs, and the service answers GET /v1/health within 1 s afterwards."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import pytest

from tests.conftest import run_cli
from tests.unit.test_template_limits import GROWTH, SECRET, alias_bomb

V = "heat_template_version: 2021-04-16\n"


class Api:
    def __init__(self, home):
        r = run_cli("service", "start", "-f", "json")
        assert r.returncode == 0, r.stderr
        self.url = json.loads(r.stdout)["url"]
        self.home = home
        self.http = httpx.Client(base_url=self.url, timeout=30, verify=str(home.ca_file),
                                 headers={"X-Undercloud-Token": (home.path / "admin.token").read_text().strip()})

    def healthy(self) -> None:
        t = time.monotonic()
        r = httpx.get(self.url + "/v1/health", timeout=1.0, verify=str(self.home.ca_file))
        assert r.status_code == 200 and time.monotonic() - t < 1.0

    def create(self, name: str, template: str, parameters: dict | None = None, files: dict | None = None):
        bundle = {"template": "t.yaml", "environments": [], "files": {"t.yaml": template, **(files or {})}}
        return self.http.post("/v1/stacks", json={"name": name, "bundle": bundle, "parameters": parameters or {}})

    def wait(self, name: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.http.get(f"/v1/stacks/{name}").json()
            if not s["stack_status"].endswith("IN_PROGRESS"):
                return s
            time.sleep(0.1)
        raise AssertionError(f"stack {name} still in progress after {timeout} s")

    def everything(self, name: str) -> str:
        parts = [self.http.get(f"/v1/stacks/{name}").text, self.http.get(f"/v1/stacks/{name}/events").text]
        for r in self.http.get(f"/v1/stacks/{name}/resources", params={"nested_depth": 5}).json():
            parts.append(self.http.get(f"/v1/stacks/{name}/resources/{r['path']}").text)
        return "\n".join(parts)


@pytest.fixture
def api(uc_home):
    return Api(uc_home)


GROUP = V + "resources:\n  g:\n    type: OS::Heat::ResourceGroup\n" \
            "    properties: {count: 10000000, resource_def: {type: OS::Heat::None}}\n"
MERGES = "\n".join([V.strip(), "x:"] + ["  m0: &m0 {a: 1}"] +
                   [f"  m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}" for i in range(1, 40)]) + "\n"
DEEP = V + "parameters:\n  p:\n    type: json\n    default:\n" + \
    "".join(f"{'  ' * (i + 3)}k{i}:\n" for i in range(200)) + "  " * 203 + "v\n"


REFUSED = [  # (what, template, other files, a part of the one-line error)
    ("alias bomb", alias_bomb(), None, "UNDERCLOUD_MAX_YAML_ALIAS_NODES"),
    ("merge-key bomb", MERGES, None, "UNDERCLOUD_MAX_YAML_ALIAS_NODES"),
    ("deep data", DEEP, None, "UNDERCLOUD_MAX_DATA_DEPTH"),
    ("group of 10**7", GROUP, None, "resources.g.properties.count: the count of members (10,000,000)"),
    ("big file", V + "resources: {}\n", {"big.txt": "x" * (600 * 1024)}, "big.txt: the size of the file in bytes"),
    ("backtracking pattern", V + "parameters:\n  p: {type: string, default: " + "a" * 40 + "!, constraints: "
     "[{allowed_pattern: '(a+)+$'}]}\nresources: {}\n", None, 'does not match pattern "(a+)+$"'),
    ("random string of 2e9", V + "resources:\n  r: {type: OS::Heat::RandomString, properties: {length: 2000000000}}\n",
     None, "resources.r.properties.length: the value (2,000,000,000) is more than the limit of 512 "
     "(set UNDERCLOUD_MAX_RANDOM_LENGTH to change it)"),
]


def test_refused_at_create_in_one_line(api):
    for what, template, files, expected in REFUSED:
        t = time.monotonic()
        r = api.create("bad", template, files=files)
        assert time.monotonic() - t < 5, what
        assert r.status_code == 400, (what, r.text)
        error = r.json()["error"]
        assert expected in error and "\n" not in error, (what, error)
        api.healthy()
    assert api.http.get("/v1/stacks").json() == []  # nothing half-written


POLYNOMIAL = V + "parameters:\n  p: {type: string, constraints: [{allowed_pattern: '^\\s*\\s*\\s*\\s*\\s*\\s*x$'}]}\n" \
                 "resources: {}\n"
LOOKAHEAD = V + "parameters:\n  p: {type: string, constraints: [{allowed_pattern: '(a+)+(?!c)b'}]}\nresources: {}\n"


def while_healthy(api: Api, *create) -> tuple[httpx.Response, int]:
    """api.create(*create), /v1/health answering within a second all along; its answer and
    how many health checks were made meanwhile."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(api.create, *create)
        checks = 0
        while not pending.done():
            api.healthy()
            checks += 1
            time.sleep(0.05)
        api.healthy()
        return pending.result(), checks


def test_patterns_that_backtrack_cannot_stop_the_service(api):
    # the case (400**6/720 steps in Python's re): RE2, linear, refused at once
    r, _ = while_healthy(api, "poly", POLYNOMIAL, {"p": " " * 400})
    assert r.status_code == 400 and "Parameter 'p' is invalid" in r.json()["error"], r.text
    assert "does not match pattern" in r.json()["error"]
    # a pattern RE2 cannot run (a lookahead), exponential in Python's re: matched in a child
    # process for at most the limit, the service answering meanwhile; refused naming the limit
    r, checks = while_healthy(api, "exp", LOOKAHEAD, {"p": "a" * 40})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "\n" not in error and "Parameter 'p' is invalid" in error and "UNDERCLOUD_MAX_PATTERN_MS" in error
    assert checks >= 1  # it ran out the limit (2 s), the service answering meanwhile
    assert api.create("ok", POLYNOMIAL, {"p": "   x"}).status_code == 201
    assert [s["stack_name"] for s in api.http.get("/v1/stacks").json()] == ["ok"]


HEAVY = V + "parameters:\n  l: {type: comma_delimited_list, default: 'a,b,c'}\nresources:\n" + "".join(
    f"  r{i}: {{type: OS::Heat::Value, properties: {{value: {{list_join: ['-', {{get_param: l}}, "
    f"[x{i}, {{str_replace: {{template: aXb, params: {{X: {i}}}}}}}]]}}}}}}\n" for i in range(3000))


def test_a_heavy_template_is_validated_and_created_off_the_event_loop(api):
    # 440 KB, 3,000 resources: seconds of validation in the request's thread and of walking
    # in the stack's, the service answering all along
    r, _ = while_healthy(api, "heavy", HEAVY)
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 120
    while (s := api.http.get("/v1/stacks/heavy").json())["stack_status"].endswith("IN_PROGRESS"):
        assert time.monotonic() < deadline
        api.healthy()
        time.sleep(0.1)
    assert s["stack_status"] == "CREATE_COMPLETE", s


REPEAT = V + f"""\
parameters:
  l: {{type: comma_delimited_list, default: "{','.join(str(i) for i in range(500))}"}}
resources:
  r:
    type: OS::Heat::Value
    properties:
      value: {{repeat: {{template: '%a%%b%%c%', for_each: {{'%a%': {{get_param: l}}, '%b%': {{get_param: l}},
                                                        '%c%': {{get_param: l}}}}}}}}
"""


def test_runaway_values_are_refused_at_validation_not_the_service(api, uc_home):
    # Known from parameters, the value is computed (bounded) at validation, as Heat would:
    # refused there with the limit named, and nothing is written.
    r = api.create("rep", REPEAT)
    assert r.status_code == 400, r.text
    assert "the length of its result in characters (125,000,000)" in r.json()["error"]
    api.healthy()

    # the case: nested str_replace towards 10**9 characters around a hidden parameter
    hidden = GROWTH.replace(f"hidden: true, default: {SECRET}", "hidden: true")
    r = api.create("huge", hidden, {"secret": SECRET})
    assert r.status_code == 400, r.text
    assert "resources.big.properties" in r.text and "UNDERCLOUD_MAX_VALUE_CHARS" in r.text
    assert SECRET not in r.text
    assert SECRET not in (uc_home.path / "service.log").read_text()
    assert api.http.get("/v1/stacks").json() == []
    api.healthy()

    # Known only at runtime (an attribute), the same value fails the stack, not the service.
    late = REPEAT.replace("{{get_param: l}}".replace("{{", "{").replace("}}", "}"), "{get_attr: [src, value]}")
    late = late.replace("resources:\n", "resources:\n  src: {type: OS::Heat::Value, properties: {value: {get_param: l}}}\n", 1)
    r = api.create("late", late)
    assert r.status_code == 201, r.text
    s = api.wait("late")
    api.healthy()
    assert s["stack_status"] == "CREATE_FAILED"
    assert "the length of its result in characters (125,000,000)" in s["stack_status_reason"]


SLOW = V + "resources:\n  a: {type: OS::Heat::TestResource, properties: {action_wait_secs: {create: 3}}}\n" \
           "  b: {type: OS::Heat::TestResource, properties: {value: {get_attr: [a, output]}}}\n"


def test_service_stop_needs_no_kill_and_the_next_start_resumes(api, uc_home):
    assert api.create("slow", SLOW).status_code == 201
    time.sleep(0.5)
    t = time.monotonic()
    r = run_cli("service", "stop")
    took = time.monotonic() - t
    assert r.returncode == 0, r.stderr
    assert took < 10, f"stop took {took:.1f} s"  # SIGKILL would come only after 30 s
    again = Api(uc_home)  # resumes the create it left IN_PROGRESS
    again.healthy()
    s = again.wait("slow")
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
