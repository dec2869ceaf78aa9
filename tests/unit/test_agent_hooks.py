"""Each hook with Heat's contract, and every way a hook can fail ending in a result."""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.unit.agent_support import deployment
from undercloud.agent import hooks
from undercloud.agent.runner import TRIM_MARKER, trim


@pytest.fixture
def env(tmp_path):
    (tmp_path / "state").mkdir()
    return dict(os.environ, UNDERCLOUD_AGENT_STATE=str(tmp_path / "state"),
                UNDERCLOUD_AGENT_OUTPUT_ROOT=str(tmp_path / "out"),
                OS_CONFIG_APPLIER_TEMPLATES=str(tmp_path / "templates"))


def test_script_hook_inputs_outputs(tmp_path, env):
    script = """#!/bin/sh
echo "name=$name count=$count flag=$flag list=$items"
echo "to stderr" >&2
printf 'result-%s' "$name" > "$heat_outputs_path.result"
exit 0
"""
    d = deployment("d1", "dep", "script", script,
                   inputs=[{"name": "name", "value": "web"}, {"name": "count", "value": 3},
                           {"name": "flag", "value": True}, {"name": "items", "value": ["a", 1]}],
                   outputs=[{"name": "result"}, {"name": "never_written"}])
    r = hooks.run(d, tmp_path / "hooks", 30, env)
    assert r["deploy_status_code"] == 0
    assert r["deploy_stdout"] == 'name=web count=3 flag=true list=["a", 1]\n'
    assert r["deploy_stderr"] == "to stderr\n"
    assert r["result"] == "result-web"
    assert "never_written" not in r


def test_script_hook_nonzero_status(tmp_path, env):
    r = hooks.run(deployment("d2", "dep", "script", "#!/bin/sh\necho oops >&2\nexit 5\n"), None, 30, env)
    assert r["deploy_status_code"] == 5
    assert r["deploy_stderr"] == "oops\n"


def test_script_without_interpreter_line_fails_with_reason(tmp_path, env):
    r = hooks.run(deployment("d3", "dep", "script", "echo no shebang"), None, 30, env)
    assert r["deploy_status_code"] == 126
    assert "cannot run the script" in r["deploy_stderr"]


def test_json_file_hook(tmp_path, env):
    target = tmp_path / "etc" / "app.json"
    r = hooks.run(deployment("d4", "dep", "json-file", {str(target): {"a": [1, 2]},
                                                        str(tmp_path / "raw.txt"): "plain"}), None, 30, env)
    assert r["deploy_status_code"] == 0, r
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    assert (tmp_path / "raw.txt").read_text() == "plain"


def test_apply_config_hook_merges_over_node_metadata(tmp_path, env):
    (tmp_path / "templates" / "etc").mkdir(parents=True)
    (tmp_path / "templates" / "etc" / "svc.conf").write_text("host={{host}} port={{port}}")
    (tmp_path / "state" / "merged.json").write_text('{"host": "node", "port": 1}')
    r = hooks.run(deployment("d5", "dep", "apply-config", {"port": 8080}), None, 30, env)
    assert r["deploy_status_code"] == 0, r
    assert (tmp_path / "out" / "etc" / "svc.conf").read_text() == "host=node port=8080"


def test_missing_hook_fails_with_reason(tmp_path, env):
    r = hooks.run(deployment("d6", "dep", "puppet", "class {}"), tmp_path / "hooks", 30, env)
    assert r["deploy_status_code"] == hooks.MISSING_HOOK
    assert "no hook for group 'puppet'" in r["deploy_failure_reason"]
    assert "no hook for group 'puppet'" in r["deploy_stderr"]


def test_external_hook_overrides_and_gets_heat_contract(tmp_path, env):
    hd = tmp_path / "hooks"
    hd.mkdir()
    (hd / "script").write_text("#!/usr/bin/env python3\nimport json,sys\nc=json.load(sys.stdin)\n"
                               "print(json.dumps({'deploy_stdout': 'external '+c['name'], 'deploy_status_code': 0}))\n")
    (hd / "script").chmod(0o755)
    r = hooks.run(deployment("d7", "mine", "script", "ignored"), hd, 30, env)
    assert r == {"deploy_stdout": "external mine", "deploy_stderr": "", "deploy_status_code": 0}


def test_crashing_hook_fails_with_reason(tmp_path, env):
    hd = tmp_path / "hooks"
    hd.mkdir()
    (hd / "boom").write_text("#!/bin/sh\necho 'half a line' \necho 'Traceback: it broke' >&2\nexit 9\n")
    (hd / "boom").chmod(0o755)
    r = hooks.run(deployment("d8", "dep", "boom", ""), hd, 30, env)
    assert r["deploy_status_code"] == 9
    assert r["deploy_failure_reason"] == "hook 'boom' crashed (exit 9): Traceback: it broke"


def test_hanging_hook_is_killed_at_its_timeout(tmp_path, env):
    pidfile = tmp_path / "child.pid"
    script = f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\necho started\nwait\n"
    t0 = time.monotonic()
    r = hooks.run(deployment("d9", "dep", "script", script), None, 1.5, env)
    assert time.monotonic() - t0 < 15
    assert r["deploy_status_code"] == hooks.TIMED_OUT
    assert "ran past its timeout of 1.5 s" in r["deploy_failure_reason"]
    # The whole process group went, grandchildren included.
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert _gone(pid)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie awaiting its reaper
    except FileNotFoundError:
        return True


def test_five_megabytes_of_output_are_trimmed_with_a_marker(tmp_path, env):
    script = "#!/bin/sh\nhead -c 5242880 /dev/zero | tr '\\0' 'x'\necho END\n"
    r = hooks.run(deployment("d10", "dep", "script", script), None, 60, env)
    assert r["deploy_status_code"] == 0
    assert len(r["deploy_stdout"]) == 5 * 1024 * 1024 + 4
    t = trim(r["deploy_stdout"], 256 * 1024)
    assert len(t.encode()) < 256 * 1024 + 200
    assert t.endswith("END\n") and t.startswith("xxx")
    assert TRIM_MARKER.format(n=5 * 1024 * 1024 + 4 - 256 * 1024) in t


def test_kube_hook_refuses_a_bad_pod(tmp_path, env):
    r = hooks.run(deployment("d11", "dep", "kube", {"kind": "Pod", "spec": {"containers": []}}), None, 30, env)
    assert r["deploy_status_code"] == 2
    assert "metadata.name: required" in r["deploy_stderr"]


def test_kube_hook_process_mode_replaces_only_on_change(tmp_path, env):
    port = __import__("tests.unit.agent_support", fromlist=["free_port"]).free_port()

    def pod(greeting):
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                "spec": {"containers": [{
                    "name": "http", "image": "unused-in-process-mode",
                    "command": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                    "env": [{"name": "GREETING", "value": greeting}],
                    "readinessProbe": {"tcpSocket": {"port": port}}}]}}

    opts = {"kube_mode": "process", "ready_timeout": 20}
    state = tmp_path / "state" / "kube"
    try:
        r1 = hooks.run(deployment("k1", "web", "kube", pod("a"), options=opts), None, 60, env)
        assert r1["deploy_status_code"] == 0, r1
        assert r1["pod_action"] == "created"
        pid1 = (state / "web" / "supervisor.pid").read_text()
        r2 = hooks.run(deployment("k2", "web", "kube", pod("a"), options=opts), None, 60, env)
        assert r2["pod_action"] == "unchanged"
        assert (state / "web" / "supervisor.pid").read_text() == pid1
        r3 = hooks.run(deployment("k3", "web", "kube", pod("b"), options=opts), None, 60, env)
        assert r3["deploy_status_code"] == 0, r3
        assert r3["pod_action"] == "replaced"
        assert r3["config_hash"] != r1["config_hash"]
        assert (state / "web" / "supervisor.pid").read_text() != pid1
    finally:
        os.environ["UNDERCLOUD_AGENT_STATE"] = env["UNDERCLOUD_AGENT_STATE"]
        try:
            from undercloud.agent import processes
            processes.stop_processes("web")
        finally:
            del os.environ["UNDERCLOUD_AGENT_STATE"]
