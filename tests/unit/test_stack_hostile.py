"""Hostile stacks sent straight to a running service (as a user bypassing the CLI would): each
is refused in one line or fails its stack in one line, no hidden value reaches what the
service shows or logs, and the service answers GET /v1/health within 1 s afterwards."""

from __future__ import annotations

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
        self.http = httpx.Client(base_url=self.url, timeout=30,
                                 headers={"X-Undercloud-Token": (home.path / "admin.token").read_text().strip()})

    def healthy(self) -> None:
        t = time.monotonic()
        r = httpx.get(self.url + "/v1/health", timeout=1.0)
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
     "[{allowed_pattern: '(a+)+$'}]}\nresources: {}\n", None, "took more than 2 s (nested repetition"),
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
