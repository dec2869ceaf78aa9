"""Stacks with a server running the agent as a local process (OS::Heat::DeployedServer)
and software deployments, through the real service and CLI."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli, stop_service
from tests.unit.agent_support import wait_for

SERVER_AND_CONFIG = """
heat_template_version: 2018-08-31
resources:
  server:
    type: OS::Heat::DeployedServer
    metadata:
      motd: {greeting: hello-from-metadata}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: who}]
      outputs: [{name: answer}]
      config: |
        #!/bin/sh
        echo "deploying for $who on $deploy_server_id ($deploy_action) $deploy_resource_name"
        printf "42-$who" > $heat_outputs_path.answer
"""

DEPLOYMENT = """
  deployment:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: server}
      input_values: {who: WHO}
  consumer:
    type: OS::Heat::Value
    properties:
      value: {get_attr: [deployment, answer]}
outputs:
  answer: {value: {get_attr: [consumer, value]}}
  stdout: {value: {get_attr: [deployment, deploy_stdout]}}
  code: {value: {get_attr: [deployment, deploy_status_code]}}
"""


class AgentProcess:
    def __init__(self, home: Path, tmp: Path):
        self.home, self.tmp, self.proc = home, tmp, None

    def start(self) -> AgentProcess:
        cfg_file = wait_for(lambda: next(iter((self.home / "agents").glob("*.json")), None)
                            if (self.home / "agents").exists() else None, what="the agent config file")
        assert cfg_file.stat().st_mode & 0o077 == 0  # owner only: it holds the token
        cfg = json.loads(cfg_file.read_text())
        for d in ("state", "templates", "refresh", "hooks", "out"):
            (self.tmp / d).mkdir(parents=True, exist_ok=True)
        cfg.update(state_dir=str(self.tmp / "state"), templates=str(self.tmp / "templates"),
                   refresh_dir=str(self.tmp / "refresh"), hooks_dir=str(self.tmp / "hooks"),
                   output_root=str(self.tmp / "out"), interval=2)
        (self.tmp / "agent.json").write_text(json.dumps(cfg))
        self.log = open(self.tmp / "agent.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "undercloud.agent", "run", "--config",
                                      str(self.tmp / "agent.json")], stderr=self.log, start_new_session=True,
                                     env=dict(os.environ, PYTHONPATH=str(Path.cwd())))
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def agent(uc_home, tmp_path):
    a = AgentProcess(uc_home.path, tmp_path / "node")
    yield a
    a.stop()


def write(tmp_path, text: str) -> str:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return str(p)


def stack_create_bg(path: str, name: str = "s", *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "undercloud", "stack", "create", name, "-t", path, "--wait",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outputs(name: str = "s") -> dict:
    r = run_cli("stack", "output", "show", name, "--all", "-f", "json")
    assert r.returncode == 0, r.stderr
    return {o["output_key"]: o["output_value"] for o in json.loads(r.stdout)}


def test_script_deployment_output_feeds_another_resource(uc_home, agent, tmp_path):
    p = stack_create_bg(write(tmp_path, SERVER_AND_CONFIG + DEPLOYMENT.replace("WHO", "world")))
    agent.start()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    o = outputs()
    assert o["answer"] == "42-world"
    assert o["stdout"].startswith("deploying for world on ") and o["stdout"].endswith("(CREATE) deployment\n")
    assert o["code"] == 0
    # The server's metadata section reached the node (os-apply-config data).
    md = json.loads((agent.tmp / "state" / "metadata.json").read_text())
    assert md["motd"] == {"greeting": "hello-from-metadata"}
    assert [d["name"] for d in md["deployments"]] == [md["deployments"][0]["name"]]
    names = [i["name"] for i in md["deployments"][0]["inputs"]]
    assert names[:6] == ["who", "deploy_server_id", "deploy_action", "deploy_stack_id",
                         "deploy_resource_name", "deploy_signal_transport"]

    # Update: a changed input runs the deployment again with deploy_action UPDATE.
    r = run_cli("stack", "update", "s", "-t", write(tmp_path, SERVER_AND_CONFIG + DEPLOYMENT.replace("WHO", "mars")),
                "--wait")
    assert r.returncode == 0, r.stderr
    o = outputs()
    assert o["answer"] == "42-mars" and "(UPDATE)" in o["stdout"]
    md = json.loads((agent.tmp / "state" / "metadata.json").read_text())
    assert len(md["deployments"]) == 1  # the old revision left the metadata

    r = run_cli("stack", "delete", "s", "--wait")
    assert r.returncode == 0, r.stderr
    assert not list((uc_home.path / "agents").glob("*.json"))  # credentials gone with the server


def test_failed_deployment_fails_the_stack_with_the_reason(uc_home, agent, tmp_path):
    text = SERVER_AND_CONFIG.replace('printf "42-$who" > $heat_outputs_path.answer',
                                     'echo "cannot reach the database" >&2; exit 3')
    p = stack_create_bg(write(tmp_path, text + DEPLOYMENT.replace("WHO", "x")))
    agent.start()
    out, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert "Deployment to server failed: deploy_status_code : Deployment exited with non-zero status code: 3" in err
    assert "cannot reach the database" in err
    assert "Traceback" not in err


def test_error_output_fails_the_deployment(uc_home, agent, tmp_path):
    text = SERVER_AND_CONFIG.replace("outputs: [{name: answer}]",
                                     "outputs: [{name: answer}, {name: problem, error_output: true}]")
    text = text.replace('printf "42-$who" > $heat_outputs_path.answer',
                        'printf "disk full" > $heat_outputs_path.problem')
    p = stack_create_bg(write(tmp_path, text + DEPLOYMENT.replace("WHO", "x")))
    agent.start()
    _out, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert "Deployment to server failed: problem : disk full" in err


def test_agent_that_never_answers_times_out_with_a_reason(uc_home, tmp_path):
    p = stack_create_bg(write(tmp_path, SERVER_AND_CONFIG + DEPLOYMENT.replace("WHO", "x")), "s",
                        "--timeout", "0.1")
    _out, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert "the agent on server" in err and "to signal deployment" in err, err


STRUCTURED_GROUP = """
heat_template_version: 2018-08-31
resources:
  a: {type: OS::Heat::DeployedServer}
  b: {type: OS::Heat::DeployedServer}
  config:
    type: OS::Heat::StructuredConfig
    properties:
      group: json-file
      config:
        OUT/NAME.json:
          role: {get_input: role}
          untouched: {keep: me}
  deployments:
    type: OS::Heat::StructuredDeploymentGroup
    properties:
      config: {get_resource: config}
      servers: {first: {get_resource: a}, second: {get_resource: b}}
      input_values: {role: controller}
      signal_transport: NO_SIGNAL
outputs:
  codes: {value: {get_attr: [deployments, deploy_status_codes]}}
"""


def test_structured_group_puts_one_resolved_deployment_per_server(uc_home, tmp_path):
    text = STRUCTURED_GROUP.replace("OUT", str(tmp_path / "out"))
    r = run_cli("stack", "create", "g", "-t", write(tmp_path, text), "--wait")
    assert r.returncode == 0, r.stderr  # NO_SIGNAL: complete without waiting for agents
    r = run_cli("stack", "resource", "list", "g", "--nested-depth", "1", "-f", "json")
    rows = json.loads(r.stdout)
    assert sorted(x["resource_name"] for x in rows if x["resource_type"] == "OS::Heat::StructuredDeployment") \
        == ["deployments.first", "deployments.second"]
    # Run both agents once: each applies its own resolved config.
    cfgs = sorted((uc_home.path / "agents").glob("*.json"))
    assert len(cfgs) == 2
    for i, cfg_file in enumerate(cfgs):
        cfg = json.loads(cfg_file.read_text())
        node = tmp_path / f"node{i}"
        cfg.update(state_dir=str(node / "state"), templates=str(node / "t"), refresh_dir=str(node / "r"),
                   hooks_dir=str(node / "h"), output_root=str(node / "o"))
        (tmp_path / f"a{i}.json").write_text(json.dumps(cfg))
        r = subprocess.run([sys.executable, "-m", "undercloud.agent", "run", "--once", "--config",
                            str(tmp_path / f"a{i}.json")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    written = json.loads((tmp_path / "out" / "NAME.json").read_text())
    assert written == {"role": "controller", "untouched": {"keep": "me"}}


def test_delete_action_runs_before_the_deployment_goes(uc_home, agent, tmp_path):
    text = SERVER_AND_CONFIG.replace('printf "42-$who" > $heat_outputs_path.answer',
                                     f'echo "$deploy_action" >> {tmp_path}/actions')
    text += DEPLOYMENT.replace("WHO", "x").replace("input_values: {who: x}",
                                                   "input_values: {who: x}\n      actions: [CREATE, DELETE]")
    p = stack_create_bg(write(tmp_path, text))
    agent.start()
    _o, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    r = run_cli("stack", "delete", "s", "--wait")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "actions").read_text().split() == ["CREATE", "DELETE"]


def test_unknown_server_is_one_clear_failure(uc_home, tmp_path):
    text = SERVER_AND_CONFIG + DEPLOYMENT.replace("WHO", "x").replace("server: {get_resource: server}",
                                                                        "server: not-a-server")
    r = run_cli("stack", "create", "s", "-t", write(tmp_path, text), "--wait")
    assert r.returncode != 0
    assert "server: 'not-a-server' has no agent in this undercloud" in r.stderr
    assert "Traceback" not in r.stderr


def test_agent_cli_list_and_config(uc_home, tmp_path):
    r = run_cli("stack", "create", "s", "-t", write(tmp_path, SERVER_AND_CONFIG), "--wait")
    assert r.returncode == 0, r.stderr
    r = run_cli("agent", "list", "-f", "json")
    assert r.returncode == 0, r.stderr
    servers = json.loads(r.stdout)
    assert [s["name"] for s in servers] == ["s-server"]
    old = json.loads(next((uc_home.path / "agents").glob("*.json")).read_text())
    out = tmp_path / "new-agent.json"
    r = run_cli("agent", "config", "s-server", "-o", str(out))
    assert r.returncode == 0, r.stderr
    new = json.loads(out.read_text())
    assert new["server_id"] == old["server_id"] and new["token"] != old["token"]
    assert out.stat().st_mode & 0o077 == 0
    assert new["token"] not in r.stdout + r.stderr
    r = run_cli("agent", "config", "nope", "-o", str(out))
    assert r.returncode != 0 and r.stderr.strip().endswith("no agent server 'nope'")
    time.sleep(0)


def test_undercloud_restarted_mid_deployment_completes(uc_home, agent, tmp_path):
    text = SERVER_AND_CONFIG.replace('printf "42-$who"', 'sleep 4; printf "42-$who"')
    p = stack_create_bg(write(tmp_path, text + DEPLOYMENT.replace("WHO", "x")))
    agent.start()
    started = wait_for(lambda: list((agent.tmp / "state" / "deployments").glob("*.json"))
                       if (agent.tmp / "state" / "deployments").exists() else None, what="the hook to start")
    assert started
    p.kill()  # the CLI waiting on the stack goes away too
    stop_service(uc_home)  # the undercloud stops while the hook runs; the agent keeps retrying
    wait_for(lambda: "signal not acknowledged" in (agent.tmp / "agent.log").read_text(), timeout=60,
             what="the hook to end and its signal to find no undercloud")
    r = run_cli("stack", "show", "s", "-f", "json")  # starts the service again; the engine resumes
    assert r.returncode == 0, r.stderr
    wait_for(lambda: json.loads(run_cli("stack", "show", "s", "-f", "json").stdout)["stack_status"]
             == "CREATE_COMPLETE", timeout=90, what="the stack to complete after the restart")
    assert outputs()["answer"] == "42-x"
    log = (agent.tmp / "agent.log").read_text()
    assert "signal acknowledged" in log
    assert log.count("running hook") == 1  # the deployment ran once


GROUP = """
heat_template_version: 2018-08-31
resources:
  a: {type: OS::Heat::DeployedServer}
  b: {type: OS::Heat::DeployedServer}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      outputs: [{name: where}]
      config: |
        #!/bin/sh
        echo "on $deploy_server_id"
        printf "$deploy_resource_name" > $heat_outputs_path.where
  deployments:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {get_resource: config}
      servers: {first: {get_resource: a}, second: {get_resource: b}}
outputs:
  stdouts: {value: {get_attr: [deployments, deploy_stdouts]}}
  codes: {value: {get_attr: [deployments, deploy_status_codes]}}
  where: {value: {get_attr: [deployments, where]}}
  ids: {value: {first: {get_resource: a}, second: {get_resource: b}}}
"""


@contextlib.contextmanager
def two_agents(uc_home, tmp_path):
    """An agent process for each of the stack's two servers (once their configs exist)."""
    cfgs = wait_for(lambda: sorted((uc_home.path / "agents").glob("*.json"))
                    if (uc_home.path / "agents").exists() and len(list((uc_home.path / "agents").glob("*.json"))) == 2
                    else None, what="two agent configs")
    procs = []
    for i, cfg_file in enumerate(cfgs):
        cfg = json.loads(cfg_file.read_text())
        node = tmp_path / f"node{i}"
        cfg.update(state_dir=str(node / "state"), templates=str(node / "t"), refresh_dir=str(node / "r"),
                   hooks_dir=str(node / "h"), output_root=str(node / "o"), interval=1)
        (tmp_path / f"a{i}.json").write_text(json.dumps(cfg))
        procs.append(subprocess.Popen([sys.executable, "-m", "undercloud.agent", "run", "--config",
                                       str(tmp_path / f"a{i}.json")], stderr=subprocess.DEVNULL,
                                      start_new_session=True))
    try:
        yield
    finally:
        for q in procs:
            os.killpg(q.pid, signal.SIGKILL)
            q.wait()


def test_deployment_group_attributes_are_maps_by_member(uc_home, tmp_path, template=GROUP):
    p = stack_create_bg(write(tmp_path, template))
    with two_agents(uc_home, tmp_path):
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    o = outputs()
    ids = o["ids"]
    assert o["stdouts"] == {"first": f"on {ids['first']}\n", "second": f"on {ids['second']}\n"}
    assert o["codes"] == {"first": 0, "second": 0}
    assert o["where"] == {"first": "first", "second": "second"}


def test_deployment_group_in_batches_of_one_runs_one_server_after_the_other(uc_home, tmp_path):
    """update_policy batch_create (rolling_update on updates) as on Heat's ResourceGroup:
    the second server's deployment starts once the first one's completed."""
    text = GROUP.replace("    type: OS::Heat::SoftwareDeploymentGroup\n",
                         "    type: OS::Heat::SoftwareDeploymentGroup\n"
                         "    update_policy: {batch_create: {max_batch_size: 1}}\n")
    test_deployment_group_attributes_are_maps_by_member(uc_home, tmp_path, text)
    r = run_cli("stack", "event", "list", "s", "--nested-depth", "2", "-f", "json")
    assert r.returncode == 0, r.stderr
    order = [(e["resource_name"].split(".")[-1], e["resource_status"]) for e in json.loads(r.stdout)
             if e["resource_name"] in ("deployments.first", "deployments.second")]
    assert order == [("first", "CREATE_IN_PROGRESS"), ("first", "CREATE_COMPLETE"),
                     ("second", "CREATE_IN_PROGRESS"), ("second", "CREATE_COMPLETE")], order


ROLLING = """
heat_template_version: 2018-08-31
parameters:
  version: {type: string, default: v1}
  batch: {type: number, default: 1}
resources:
  a: {type: OS::Heat::DeployedServer}
  b: {type: OS::Heat::DeployedServer}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config:
        str_replace:
          template: |
            #!/bin/sh
            echo VERSION >> RECORD.$deploy_resource_name
            [ VERSION != broken ] || { echo "VERSION does not start" >&2; exit 3; }
          params: {VERSION: {get_param: version}, RECORD: RECORD_PATH}
  deployments:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy: {rolling_update: {max_batch_size: {get_param: batch}}}
    properties:
      config: {get_resource: config}
      servers: {first: {get_resource: a}, second: {get_resource: b}}
"""


def test_rolling_update_stops_at_the_first_failing_member_and_rolls_it_back(uc_home, tmp_path):
    """What `overcloud update` relies on: a group updated one member at a time; a failing
    member stops the rollout (the next one is never touched) and, with rollback, runs
    the previous configuration again; `stack update --existing` keeps the template."""
    record = tmp_path / "ran"
    p = stack_create_bg(write(tmp_path, ROLLING.replace("RECORD_PATH", str(record))))

    def ran(member):
        f = tmp_path / f"ran.{member}"
        return f.read_text().split() if f.exists() else []

    def update(version):
        return run_cli("stack", "update", "s", "--existing", "-P", f"version={version}", "--rollback", "--wait",
                       "-f", "json")

    with two_agents(uc_home, tmp_path):
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        r = update("v2")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["stack_status"] == "UPDATE_COMPLETE"
        assert (ran("first"), ran("second")) == (["v1", "v2"], ["v1", "v2"])
        r = update("broken")
        assert r.returncode == 1
        assert "ROLLBACK_COMPLETE" in r.stderr and "broken does not start" in r.stderr, r.stderr
    # The first member failed, then ran v2 again; the second was never given the broken one.
    assert ran("first") == ["v1", "v2", "broken", "v2"]
    assert ran("second") == ["v1", "v2"]
    s = json.loads(run_cli("stack", "show", "s", "-f", "json").stdout)
    assert s["stack_status"] == "ROLLBACK_COMPLETE"
    assert s["parameters"]["version"] == "v2"
    events = json.loads(run_cli("stack", "event", "list", "s", "--nested-depth", "2", "-f", "json").stdout)
    failed = [e for e in events if e["resource_status"].endswith("FAILED") and e["resource_name"] == "deployments.first"]
    assert failed and "broken does not start" in failed[0]["resource_status_reason"], failed


TWO_STEPS = """
heat_template_version: 2018-08-31
parameters:
  version: {type: string, default: v1}
resources:
  a: {type: OS::Heat::DeployedServer}
  b: {type: OS::Heat::DeployedServer}
""" + "".join(f"""
  config{step}:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config:
        str_replace:
          template: |
            #!/bin/sh
            echo VERSION >> DIR/ran.{step}.$deploy_resource_name
            ! grep -qsx VERSION DIR/fail.$deploy_resource_name || {{ echo "VERSION fails on $deploy_resource_name" >&2; exit 3; }}
          params: {{VERSION: {{get_param: version}}, DIR: TMP}}
  step{step}:
    type: OS::Heat::SoftwareDeploymentGroup
    update_policy: {{rolling_update: {{max_batch_size: 1}}}}
    {"depends_on: [step1]" if step == 2 else ""}
    properties:
      config: {{get_resource: config{step}}}
      servers: {{first: {{get_resource: a}}, second: {{get_resource: b}}}}
""" for step in (1, 2))


def test_max_fail_rolls_a_failing_member_back_and_goes_on(uc_home, tmp_path):
    """`stack update --max-fail 1`: the member that fails runs its previous configuration
    again, its server's later step is skipped, the other server gets everything; a second
    failing member is one too many (the update rolls back); an update that changes
    nothing retries the member rolled back."""
    p = stack_create_bg(write(tmp_path, TWO_STEPS.replace("TMP", str(tmp_path))))

    def ran(step, member):
        f = tmp_path / f"ran.{step}.{member}"
        return f.read_text().split() if f.exists() else []

    def update(*args):
        r = run_cli("stack", "update", "s", "--existing", "--rollback", "--wait", "-f", "json", *args)
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)

    with two_agents(uc_home, tmp_path):
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        (tmp_path / "fail.first").write_text("v2\n")  # v2 fails on the first server
        r, s = update("-P", "version=v2", "--max-fail", "1")
        assert r.returncode == 0, r.stderr
        assert s["stack_status"] == "UPDATE_COMPLETE"
        assert "1 member(s) failed and were rolled back to their previous properties (max_fail 1): " \
               "step1.first: Deployment to server failed" in s["stack_status_reason"], s["stack_status_reason"]
        assert "v2 fails on first" in s["stack_status_reason"]
        assert (ran(1, "first"), ran(2, "first")) == (["v1", "v2", "v1"], ["v1"])
        assert (ran(1, "second"), ran(2, "second")) == (["v1", "v2"], ["v1", "v2"])
        events = json.loads(run_cli("stack", "event", "list", "s", "--nested-depth", "2", "-f", "json").stdout)
        first = [e["resource_status"] for e in events if e["resource_name"] == "step1.first"]
        assert first[-4:] == ["UPDATE_IN_PROGRESS", "UPDATE_FAILED", "ROLLBACK_IN_PROGRESS", "ROLLBACK_COMPLETE"]

        # It fails again on v3 (no --max-fail): the stack rollback brings it back to v1,
        # what it had, not to v2, the previous definition it failed on.
        (tmp_path / "fail.first").write_text("v2\nv3\n")
        r, _ = update("-P", "version=v3")
        assert r.returncode == 1 and "ROLLBACK_COMPLETE" in r.stderr and "v3 fails on first" in r.stderr, r.stderr
        assert (ran(1, "first"), ran(2, "first")) == (["v1", "v2", "v1", "v3", "v1"], ["v1"])
        assert (ran(1, "second"), ran(2, "second")) == (["v1", "v2"], ["v1", "v2"])

        # Fixed, an update that changes nothing retries it (the rest is left alone).
        (tmp_path / "fail.first").unlink()
        r, s = update()
        assert r.returncode == 0, r.stderr
        assert s["stack_status_reason"] == "Stack UPDATE completed successfully"
        assert (ran(1, "first"), ran(2, "first")) == (["v1", "v2", "v1", "v3", "v1", "v2"], ["v1", "v2"])
        assert (ran(1, "second"), ran(2, "second")) == (["v1", "v2"], ["v1", "v2"])

        # Both fail with --max-fail 1: the second is one too many, and --rollback brings
        # the stack back (the first, rolled back within max-fail, stays on v2).
        (tmp_path / "fail.first").write_text("v3\n")
        (tmp_path / "fail.second").write_text("v3\n")
        r, _ = update("-P", "version=v3", "--max-fail", "1")
        assert r.returncode == 1
        assert "ROLLBACK_COMPLETE" in r.stderr and "v3 fails on second" in r.stderr, r.stderr
    assert ran(1, "first") == ["v1", "v2", "v1", "v3", "v1", "v2", "v3", "v2"]
    assert ran(1, "second") == ["v1", "v2", "v3", "v2"]
    assert (ran(2, "first"), ran(2, "second")) == (["v1", "v2"], ["v1", "v2"])


def test_max_fail_bad_input_is_one_line(uc_home, tmp_path):
    r = run_cli("stack", "update", "s", "--existing", "--max-fail", "-1")
    assert r.returncode == 2 and "--max-fail" in r.stderr and "Traceback" not in r.stderr
