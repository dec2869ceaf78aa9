"""The agent against a real undercloud API (uvicorn on loopback): collect with ETag,
apply/refresh, deployments, signals acknowledged, restarts on either side, masking."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.unit.agent_support import LiveService, deployment, settings, wait_for
from undercloud.agent.logs import Log
from undercloud.agent.runner import Agent


@pytest.fixture
def svc(tmp_path):
    s = LiveService(tmp_path / "uc", plain_agents=True).start()
    yield s
    s.stop()


def make_agent(tmp_path, svc, server_id="s1", name="node1", **kw):
    token = svc.meta.register(server_id, name)
    stream = io.StringIO()
    agent = Agent(settings(tmp_path / server_id, svc.url, server_id, token, **kw), Log(stream))
    return agent, token, stream


def test_script_deployment_end_to_end_and_304(tmp_path, svc):
    agent, _token, _ = make_agent(tmp_path, svc)
    counter = tmp_path / "runs"
    script = f"#!/bin/sh\necho run >> {counter}\necho \"hello $who\"\nprintf 42 > $heat_outputs_path.answer\n"
    svc.meta.put_deployment("s1", deployment("d1", "10_hello", "script", script,
                                             inputs=[{"name": "who", "value": "world"}],
                                             outputs=[{"name": "answer"}]))
    assert agent.cycle()
    sig = svc.meta.signal_of("d1")
    assert sig["deploy_status_code"] == 0
    assert sig["deploy_stdout"] == "hello world\n"
    assert sig["answer"] == "42"
    etag = (agent.state / "metadata.etag").read_text()
    # Nothing changed: the poll is a 304 and nothing runs again.
    got = agent.uc.fetch(etag)
    assert not got.changed
    assert agent.cycle()
    assert counter.read_text().count("run") == 1
    assert json.loads((agent.journal / "d1.json").read_text())["state"] == "done"


def test_metadata_sources_apply_and_refresh(tmp_path, svc):
    agent, _t, _ = make_agent(tmp_path, svc)
    s = agent.s
    (s.templates / "etc").mkdir(parents=True)
    (s.templates / "etc" / "svc.conf").write_text("host={{svc.host}} port={{svc.port}} local={{local}}")
    local = tmp_path / "local.json"
    local.write_text('{"local": "L", "svc": {"host": "from-local", "port": 1}}')
    s.metadata_files = [local]
    (s.refresh_dir / "configure.d").mkdir(parents=True)
    hook = s.refresh_dir / "configure.d" / "50-record"
    hook.write_text(f"#!/bin/sh\ncat \"$OS_CONFIG_FILES\" > {tmp_path / 'seen.json'}\n")
    hook.chmod(0o755)
    svc.meta.set_extra("s1", {"svc": {"host": "from-undercloud"}})
    svc.meta.put_deployment("s1", deployment("c1", "20_cfg", "os-apply-config", {"svc": {"port": 8080}}))
    assert agent.cycle()
    assert (s.output_root / "etc/svc.conf").read_text() == "host=from-undercloud port=8080 local=L"
    assert json.loads((tmp_path / "seen.json").read_text())["svc"]["port"] == 8080
    assert svc.meta.signal_of("c1")["deploy_status_code"] == 0


def test_failed_refresh_fails_the_os_apply_config_deployment(tmp_path, svc):
    agent, _t, _ = make_agent(tmp_path, svc)
    (agent.s.refresh_dir / "configure.d").mkdir(parents=True)
    bad = agent.s.refresh_dir / "configure.d" / "10-bad"
    bad.write_text("#!/bin/sh\necho nope >&2\nexit 2\n")
    bad.chmod(0o755)
    svc.meta.put_deployment("s1", deployment("c2", "cfg", "Heat::Ungrouped", {"a": 1}))
    agent.cycle()
    sig = svc.meta.signal_of("c2")
    assert sig["deploy_status_code"] == 1
    assert "10-bad exited with 2: nope" in sig["deploy_failure_reason"]


def test_token_opens_only_its_own_server(tmp_path, svc):
    a1, t1, _ = make_agent(tmp_path, svc, "s1", "n1")
    a2, t2, _ = make_agent(tmp_path, svc, "s2", "n2")
    svc.meta.put_deployment("s1", deployment("only-s1", "x", "script", "#!/bin/sh\ntrue\n"))
    from undercloud.agent.transport import Refused, Undercloud
    thief = Undercloud(svc.url, "s1", t2)
    with pytest.raises(Refused, match="401"):
        thief.fetch(None)
    with pytest.raises(Refused, match="401"):
        thief.signal("only-s1", {"deploy_status_code": 0})
    with pytest.raises(Refused, match="404"):
        Undercloud(svc.url, "s2", t2).signal("only-s1", {"deploy_status_code": 0})
    assert svc.meta.signal_of("only-s1") is None


def test_failure_modes_each_end_in_a_signal(tmp_path, svc):
    agent, _t, _ = make_agent(tmp_path, svc)
    (agent.s.hooks_dir / "crashy").write_text("#!/bin/sh\necho 'fatal: bad config' >&2\nexit 3\n")
    (agent.s.hooks_dir / "crashy").chmod(0o755)
    for d in (deployment("m", "1_missing", "chef", "x"),
              deployment("c", "2_crash", "crashy", "x"),
              deployment("h", "3_hang", "script", "#!/bin/sh\nsleep 600\n", options={"timeout": 1}),
              deployment("b", "4_big", "script", "#!/bin/sh\nhead -c 5242880 /dev/zero | tr '\\0' y\n"),
              deployment("ok", "5_ok", "script", "#!/bin/sh\necho fine\n")):
        svc.meta.put_deployment("s1", d)
    agent.cycle()
    sigs = {k: svc.meta.signal_of(k) for k in ("m", "c", "h", "b", "ok")}
    assert sigs["m"]["deploy_status_code"] == 127 and "no hook for group 'chef'" in sigs["m"]["deploy_stderr"]
    assert sigs["c"]["deploy_status_code"] == 3 and "fatal: bad config" in sigs["c"]["deploy_failure_reason"]
    assert sigs["h"]["deploy_status_code"] == 124 and "timeout of 1 s" in sigs["h"]["deploy_failure_reason"]
    assert sigs["b"]["deploy_status_code"] == 0 and "trimmed" in sigs["b"]["deploy_stdout"]
    assert len(sigs["b"]["deploy_stdout"]) < 300 * 1024
    assert sigs["ok"]["deploy_stdout"] == "fine\n"


def test_a_pods_failure_reason_reaches_the_undercloud_whole_with_its_logs_last_line(tmp_path, svc):
    # A Pod's reason keeps the last lines of its log within the contract's length; the agent
    # must not cut it shorter (the line that says why the service stopped comes last). A
    # reason past that length from another hook is cut to it.
    from undercloud.agent import kube
    from undercloud.agent.settings import REASON_CHARS

    agent, _t, _ = make_agent(tmp_path, svc)
    log = "".join(f"uc-start: line {i} of the service's log, long enough to fill the reason {'.' * 60}\n"
                  for i in range(20)) + "uc-start: the last line, why it stopped\n"
    pod_reason = kube.failure_reason("pod svc: container svc: readiness probe (HTTP GET :1/) did not pass", log)
    assert 500 < len(pod_reason) <= REASON_CHARS
    for did, reason in (("pod", pod_reason), ("long", "x" * 5000)):
        hook = agent.s.hooks_dir / f"says-{did}"
        hook.write_text("#!/bin/sh\ncat >/dev/null\ncat <<'EOF'\n" + json.dumps(
            {"deploy_stdout": "", "deploy_stderr": "", "deploy_status_code": 1, "deploy_failure_reason": reason})
            + "\nEOF\n")
        hook.chmod(0o755)
        svc.meta.put_deployment("s1", deployment(did, f"1_{did}", f"says-{did}", "x"))
    agent.cycle()
    assert svc.meta.signal_of("pod")["deploy_failure_reason"] == pod_reason
    assert pod_reason.endswith(" | uc-start: the last line, why it stopped")
    long = svc.meta.signal_of("long")["deploy_failure_reason"]
    assert len(long) == REASON_CHARS and long.endswith("x…")


def test_signal_retried_until_acknowledged(tmp_path, svc, monkeypatch):
    agent, _t, stream = make_agent(tmp_path, svc)
    svc.meta.put_deployment("s1", deployment("r1", "dep", "script", "#!/bin/sh\necho done\n"))
    assert agent.collect()[0] is not None
    svc.stop()  # the undercloud goes away after the agent has its metadata
    monkeypatch.setattr("undercloud.agent.runner.time.sleep", lambda s: None)
    agent.cycle()
    assert json.loads((agent.journal / "r1.json").read_text())["state"] == "signalling"
    assert "signal not acknowledged" in stream.getvalue()
    svc.start()
    assert svc.meta.signal_of("r1") is None
    agent.cycle()
    assert svc.meta.signal_of("r1")["deploy_stdout"] == "done\n"
    assert json.loads((agent.journal / "r1.json").read_text())["state"] == "done"


def test_cached_metadata_used_while_undercloud_is_down(tmp_path, svc):
    agent, _t, _ = make_agent(tmp_path, svc)
    svc.meta.set_extra("s1", {"k": "v"})
    md, changed = agent.collect()
    assert changed and md["k"] == "v"
    svc.stop()
    md, changed = agent.collect()
    assert md["k"] == "v" and not changed
    svc.start()


def test_undercloud_restarted_while_agents_poll(tmp_path, svc):
    agents = [make_agent(tmp_path, svc, f"s{i}", f"n{i}", interval=1.0)[0] for i in range(3)]
    stop = threading.Event()
    threads = [threading.Thread(target=a.run_forever, args=(stop.is_set,), daemon=True) for a in agents]
    for t in threads:
        t.start()
    try:
        for i in range(3):
            svc.meta.put_deployment(f"s{i}", deployment(f"a{i}", "first", "script", "#!/bin/sh\necho one\n"))
        wait_for(lambda: all(svc.meta.signal_of(f"a{i}") for i in range(3)), what="first deployments")
        svc.stop()
        time.sleep(1.5)  # agents poll a dead undercloud and back off
        svc.start()
        for i in range(3):
            svc.meta.put_deployment(f"s{i}", deployment(f"b{i}", "second", "script", "#!/bin/sh\necho two\n"))
        wait_for(lambda: all(svc.meta.signal_of(f"b{i}") for i in range(3)), timeout=60,
                 what="deployments made after the restart")
        assert all(svc.meta.signal_of(f"b{i}")["deploy_stdout"] == "two\n" for i in range(3))
    finally:
        stop.set()
        svc.meta.release()  # the agents' held long-polls answer now: their rounds see the stop
        for t in threads:
            t.join(30)


def test_long_poll_returns_on_change(tmp_path, svc):
    agent, _t, _ = make_agent(tmp_path, svc)
    md, _ = agent.collect()
    etag = (agent.state / "metadata.etag").read_text()
    threading.Timer(0.5, lambda: svc.meta.set_extra("s1", {"x": 1})).start()
    t0 = time.monotonic()
    got = agent.uc.fetch(etag, wait=20)
    assert got.changed and got.metadata["x"] == 1
    assert time.monotonic() - t0 < 10


def test_secrets_masked_in_agent_log(tmp_path, svc):
    agent, token, stream = make_agent(tmp_path, svc)
    (agent.s.hooks_dir / "leaky").write_text("#!/bin/sh\necho \"failed with password hunter2-secret\" >&2\nexit 1\n")
    (agent.s.hooks_dir / "leaky").chmod(0o755)
    svc.meta.put_deployment("s1", deployment(
        "p1", "dep", "leaky", "x", inputs=[{"name": "db_password", "value": "hunter2-secret"},
                                           {"name": "plain", "value": "visible-value"}]))
    svc.stop()  # also log signal failures, which name the URL
    agent.collect()
    svc.start()
    agent.cycle()
    log = stream.getvalue()
    assert "failed with password ***" in log
    assert "hunter2-secret" not in log
    assert token not in log
    sig = svc.meta.signal_of("p1")
    assert sig["deploy_status_code"] == 1
    # The reason the undercloud shows in the stack's status and events is masked too.
    assert sig["deploy_failure_reason"] == "hook 'leaky' crashed (exit 1): failed with password ***"


def test_agent_killed_mid_hook_resumes_after_restart(tmp_path, svc):
    token = svc.meta.register("s9", "n9")
    s = settings(tmp_path / "s9", svc.url, "s9", token, interval=0.5)
    cfg = tmp_path / "agent.json"
    cfg.write_text(json.dumps({k: str(v) if hasattr(v, "parts") else v for k, v in vars(s).items()
                               if k != "metadata_files"}))
    starts = tmp_path / "starts"
    # The first run would hang for a minute: only a killed orphan lets the test end early.
    script = (f"#!/bin/sh\n[ -e {starts} ] && n=1 || n=60\necho start >> {starts}\n"
              "sleep $n\necho finished\n")
    svc.meta.put_deployment("s9", deployment("k1", "slow", "script", script))
    cmd = [sys.executable, "-m", "undercloud.agent", "run", "--config", str(cfg)]
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        wait_for(lambda: starts.exists(), what="the hook to start")
        os.killpg(p.pid, signal.SIGKILL)  # the agent and its hook die, as in a reboot
        p.wait()
        entry = json.loads((s.state_dir / "deployments" / "k1.json").read_text())
        assert entry["state"] == "running"
        assert svc.meta.signal_of("k1") is None
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=env, start_new_session=True)
        sig = wait_for(lambda: svc.meta.signal_of("k1"), what="the resumed deployment's signal")
        assert sig["deploy_stdout"] == "finished\n"
        assert starts.read_text().count("start") == 2
        # The first run's hook, orphaned by the kill, was stopped before the re-run.
        assert not os.path.exists(f"/proc/{entry['pid']}") or _zombie(entry["pid"])
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_bad_agent_config_is_one_line(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text('{"url": "http://127.0.0.1:1", "server_id": "x"}')
    r = subprocess.run([sys.executable, "-m", "undercloud.agent", "run", "--config", str(cfg)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == f"undercloud-agent: {cfg}: token: required"


def test_polls_are_jittered_and_back_off_when_the_undercloud_is_away(tmp_path, svc, monkeypatch):
    agent, _t, _ = make_agent(tmp_path, svc, interval=10.0, long_poll=False)
    sleeps: list[float] = []
    monkeypatch.setattr("undercloud.agent.runner.time.sleep", sleeps.append)

    def rounds(n):
        it = iter(range(n))
        return lambda: next(it, None) is None

    agent.run_forever(stop=rounds(30))
    assert len(sleeps) == 30 and all(7.5 <= s <= 12.5 for s in sleeps)  # interval +-25 %
    assert len({round(s, 3) for s in sleeps}) > 20  # not in step with other agents
    svc.stop()
    sleeps.clear()
    # without jitter the backoff doubles and is capped at the interval
    monkeypatch.setattr("undercloud.agent.runner.random.uniform", lambda a, b: 1.0)
    agent.run_forever(stop=rounds(8))
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]
    svc.start()
