"""The kube hook as the overcloud uses it: a List of ConfigMaps + Pods per deploy step."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time

import pytest

from undercloud.agent import engine, hooks, kube, netns, pod_spec, probes, processes
from undercloud.agent.libpod import config_tar


@pytest.fixture
def env(tmp_path):
    return {"UNDERCLOUD_AGENT_STATE": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}


def deployment(config, options=None):
    return {"id": "d1", "name": "step", "group": "kube", "config": config, "options": options or {},
            "inputs": [], "outputs": []}


def test_an_empty_step_succeeds_with_nothing_to_run(env):
    r = hooks.run(deployment({"apiVersion": "v1", "kind": "List", "items": []}), None, 30, env)
    assert r["deploy_status_code"] == 0
    assert "no pods" in r["deploy_stdout"]


@pytest.mark.parametrize("items, message", [
    (["not a map"], "items: a list of ConfigMaps and Pods"),
    ([{"kind": "Pod", "metadata": {}, "spec": {"containers": [{"name": "c"}]}}], "metadata.name: required"),
    ([{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}], "at least one container"),
])
def test_a_bad_list_is_refused_before_anything_runs(env, items, message):
    r = hooks.run(deployment({"kind": "List", "items": items}), None, 30, env)
    assert r["deploy_status_code"] == 2
    assert message in r["deploy_stderr"]


def test_process_mode_plays_every_pod_of_the_list(env, monkeypatch):
    def pod(name, port):
        return {"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{
            "name": name, "command": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            "readinessProbe": {"tcpSocket": {"port": port}}}]}}
    cfg = {"kind": "List", "items": [{"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}},
                                     pod("web1", 18931), pod("web2", 18932)]}
    opts = {"kube_mode": "process", "ready_timeout": 20}
    try:
        r = hooks.run(deployment(cfg, opts), None, 60, env)
        assert r["deploy_status_code"] == 0, r
        assert "pod web1: created" in r["deploy_stdout"] and "pod web2: created" in r["deploy_stdout"]
        again = hooks.run(deployment(cfg, opts), None, 60, env)
        assert "pod web1: unchanged" in again["deploy_stdout"] and "pod web2: unchanged" in again["deploy_stdout"]
    finally:
        monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", env["UNDERCLOUD_AGENT_STATE"])
        processes.stop_processes("web1")
        processes.stop_processes("web2")


def test_a_steps_pods_start_together_so_one_may_wait_for_a_later_one(env, monkeypatch):
    # web1 is ready only once web2 (after it in the list) answers: played one after the
    # other, web1 would wait for a Pod not yet started and fail at its timeout.
    def pod(name, port, ready_port):
        return {"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{
            "name": name, "command": ["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            "readinessProbe": {"tcpSocket": {"port": ready_port}}}]}}
    bad = {"kind": "Pod", "metadata": {"name": "broken"}, "spec": {"containers": [{
        "name": "broken", "command": ["sleep", "30"], "readinessProbe": {"tcpSocket": {"port": 18937}}}]}}
    cfg = {"kind": "List", "items": [pod("web1", 18935, 18936), pod("web2", 18936, 18936)]}
    opts = {"kube_mode": "process", "ready_timeout": 15}
    try:
        r = hooks.run(deployment(cfg, opts), None, 60, env)
        assert r["deploy_status_code"] == 0, r
        assert r["deploy_stdout"].index("pod web1: created") < r["deploy_stdout"].index("pod web2: created")
        # A failing Pod is the step's result; the Pods after it were still played.
        cfg["items"] = [bad, pod("web3", 18938, 18938)]
        failed = hooks.run(deployment(cfg, dict(opts, ready_timeout=3)), None, 60, env)
        assert failed["deploy_status_code"] == 1
        assert failed["deploy_failure_reason"].startswith("pod broken: container broken: readiness probe (TCP :18937)")
        assert "pod web3: created" in failed["deploy_stdout"]
    finally:
        monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", env["UNDERCLOUD_AGENT_STATE"])
        for name in ("web1", "web2", "web3", "broken"):
            processes.stop_processes(name)


def test_a_failing_probe_names_pod_container_and_check(env, monkeypatch):
    cfg = {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "db"}, "spec": {"containers": [{
        "name": "mysql", "command": ["sh", "-c", "echo cannot open the data directory >&2; sleep 30"],
        "readinessProbe": {"tcpSocket": {"port": 18939}}}]}}]}
    try:
        r = hooks.run(deployment(cfg, {"kube_mode": "process", "ready_timeout": 2}), None, 60, env)
    finally:
        monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", env["UNDERCLOUD_AGENT_STATE"])
        processes.stop_processes("db")
    assert r["deploy_status_code"] == 1
    reason = r["deploy_failure_reason"]
    assert reason.startswith("pod db: container mysql: readiness probe (TCP :18939) did not pass within 2 s")
    assert "last lines of its log: | cannot open the data directory" in reason


def test_a_long_log_tail_keeps_its_last_line_within_the_reasons_size():
    """A service that printed many long lines before it stopped: the older lines give way,
    the last one (why it stopped) stays whole, and the reason fits its budget."""
    log = "".join(f"uc-start: /var/lib/undercloud/config/file-{i} -> /etc/svc/{'x' * 180}\n" for i in range(12))
    log += "uc-svc-start: broken on purpose\n"
    reason = kube.failure_reason("pod svc: container svc: readiness probe (HTTP GET :1/) did not pass", log)
    assert len(reason) <= kube.REASON_CHARS and "\n" not in reason
    assert reason.endswith(" | uc-svc-start: broken on purpose")
    # 5 of the 7 lines before it in the last 8 fit (each cut to 200 characters); a 6th would not
    assert reason.count(" | uc-start: ") == 5 and len(reason) + len(" | ") + 200 > kube.REASON_CHARS
    short = kube.failure_reason("pod a: container a: failed", "one\n\ntwo\n")
    assert short == "pod a: container a: failed | last lines of its log: | one | two"
    assert kube.failure_reason("pod a: container a: failed", "") == "pod a: container a: failed"


def test_a_container_that_keeps_exiting_ends_the_wait_early():
    pod = {"spec": {"containers": [{"name": "c", "readinessProbe": {"tcpSocket": {"port": 1}}}]}}
    start = time.monotonic()
    got = probes.wait_ready(pod, 60, dead=lambda: ("c", "the container exited 3 times (last exit code 1)"))
    assert time.monotonic() - start < 5
    assert got[0] == "c" and got[2] == "did not pass: the container exited 3 times (last exit code 1)"


def test_configmaps_become_a_tar_at_their_mount_paths():
    data = config_tar([("/var/lib/undercloud/config", {"config.json": json.dumps({"command": ["x"]}),
                                                              "keystone.conf": "[DEFAULT]\n"})])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert {"var", "var/lib", "var/lib/undercloud", "var/lib/undercloud/config"} <= set(names)
        assert tar.extractfile("var/lib/undercloud/config/keystone.conf").read() == b"[DEFAULT]\n"
        assert json.loads(tar.extractfile("var/lib/undercloud/config/config.json").read()) == {"command": ["x"]}


def test_netns_mode_is_chosen_on_container_nodes(monkeypatch):
    monkeypatch.setenv("CONTAINER_HOST", "unix:///run/podman/podman.sock")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", "container:uc1-node-0")
    assert engine.choose_mode({}) == "netns"
    assert netns.NetnsEngine().container_name("keystone", "api") == "uc1-node-0-keystone-api"
    monkeypatch.delenv("UNDERCLOUD_NODE_NETNS")
    assert engine.choose_mode({}) in ("podman", "process")


@pytest.mark.parametrize("container, volumes, message", [
    ({"securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_ADMINN"]}}}, [],
     "pod ka: spec.containers[0].securityContext.capabilities.add[1]: unknown capability 'NET_ADMINN'"),
    ({"securityContext": {"capabilities": {"drop": "ALL"}}}, [],
     "pod ka: spec.containers[0].securityContext.capabilities.drop: expected a list of capability names"),
    ({}, [{"name": "data", "persistentVolumeClaim": {"claimName": "My Data"}}],
     "pod ka: spec.volumes[0].persistentVolumeClaim.claimName: 'My Data' is not a claim name"),
    ({}, [{"name": "data", "persistentVolumeClaim": {}}],
     "pod ka: spec.volumes[0].persistentVolumeClaim.claimName: None is not a claim name"),
])
def test_a_bad_capability_or_claim_is_one_line_naming_pod_and_path(env, container, volumes, message):
    pod = {"kind": "Pod", "metadata": {"name": "ka"},
           "spec": {"containers": [{"name": "c", "command": ["true"], **container}], "volumes": volumes}}
    r = hooks.run(deployment({"kind": "List", "items": [pod]}), None, 30, env)
    assert r["deploy_status_code"] == 2
    assert r["deploy_stderr"].startswith(f"kube: {message}"), r["deploy_stderr"]
    assert "\n" not in r["deploy_stderr"].strip()


class FakeLibpod:
    """The few libpod REST calls play_netns makes, on a Unix socket; records them."""

    def __init__(self, path):
        import http.server
        import socketserver
        import threading

        self.calls, self.volumes = [], {}
        self.exec_results: list[tuple[int, str]] = []  # (exit code, output) per exec, in order
        self.execs: dict[str, dict] = {}
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=None):
                data = json.dumps(body).encode() if body is not None else b""
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first (a test's short timeout): nothing to tell it

            def handle_one(self, method):
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else b""
                path = self.path.removeprefix("/v4.0.0/libpod")
                body = json.loads(raw) if raw and self.headers.get("Content-Type") == "application/json" else None
                fake.calls.append((method, path.split("?")[0], body))
                if path.startswith("/containers/json"):
                    return self.reply(200, [])
                if method == "GET" and path.startswith("/volumes/") and path.endswith("/exists"):
                    return self.reply(204 if path.split("/")[2] in fake.volumes else 404)
                if path == "/volumes/create":
                    fake.volumes[body["Name"]] = body
                    return self.reply(201, {"Name": body["Name"]})
                if path == "/containers/create":
                    return self.reply(201, {"Id": body["name"]})
                if method == "POST" and path.endswith("/exec") and path.startswith("/containers/"):
                    exec_id = f"e{len(fake.execs)}"
                    code, out = fake.exec_results.pop(0) if fake.exec_results else (0, "")
                    fake.execs[exec_id] = {"container": path.split("/")[2], "argv": body["Cmd"],
                                           "code": code, "out": out}
                    return self.reply(201, {"Id": exec_id})
                if method == "POST" and path.startswith("/exec/") and path.endswith("/start"):
                    out = fake.execs[path.split("/")[2]]["out"].encode()
                    frame = b"\x01\0\0\0" + len(out).to_bytes(4, "big") + out if out else b""
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(frame)
                    return None
                if method == "GET" and path.startswith("/exec/"):
                    return self.reply(200, {"Running": False, "ExitCode": fake.execs[path.split("/")[2]]["code"]})
                return self.reply(200 if method == "PUT" else 204)

            def do_GET(self):
                self.handle_one("GET")

            def do_POST(self):
                self.handle_one("POST")

            def do_PUT(self):
                self.handle_one("PUT")

            def do_DELETE(self):
                self.handle_one("DELETE")

        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def created(self):
        return [b for m, p, b in self.calls if p == "/containers/create"]


def test_netns_mode_maps_capabilities_and_claims_to_the_create_body(tmp_path, monkeypatch):
    sock = tmp_path / "podman.sock"
    api = FakeLibpod(sock)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{sock}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", "container:uc1-node-0")
    pod = {"kind": "Pod", "metadata": {"name": "mysql"}, "spec": {
        "containers": [{"name": "mysql", "image": "img:1", "command": ["run"],
                        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "CAP_NET_RAW"], "drop": ["mknod"]}},
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"},
                                         {"name": "seed", "mountPath": "/seed", "readOnly": True}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "mysql-data"}},
                    {"name": "seed", "persistentVolumeClaim": {"claimName": "seed"}}]}}
    try:
        pod_spec.validate(pod)
        netns.play_netns("mysql", pod, {})
        (body,) = api.created()
        assert body["cap_add"] == ["CAP_NET_ADMIN", "CAP_NET_RAW"] and body["cap_drop"] == ["CAP_MKNOD"]
        assert body["volumes"] == [{"Name": "uc1-node-0-mysql-data", "Dest": "/var/lib/mysql", "Options": []},
                                   {"Name": "uc1-node-0-seed", "Dest": "/seed", "Options": ["ro"]}]
        # Per node, labelled for the node's deletion.
        assert api.volumes["uc1-node-0-mysql-data"]["Label"] == {"undercloud.node": "uc1-node-0",
                                                                  "undercloud.claim": "mysql-data"}
        # Replacing the Pod keeps the volumes: they are not made again (nor removed).
        api.calls.clear()
        netns.play_netns("mysql", pod, {})
        assert not [p for m, p, b in api.calls if p == "/volumes/create" or p.startswith("/volumes/") and m == "DELETE"]
        assert api.created()[0]["volumes"][0]["Name"] == "uc1-node-0-mysql-data"
        # A container without any gets empty lists (podman's defaults).
        api.calls.clear()
        netns.play_netns("web", {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "w", "image": "i"}]}}, {})
        assert (api.created()[0]["cap_add"], api.created()[0]["volumes"]) == ([], [])
    finally:
        api.server.shutdown()
        api.server.server_close()


@pytest.fixture
def libpod(tmp_path, monkeypatch):
    """A fake podman API socket and the environment of a container node's agent."""
    sock = tmp_path / "podman.sock"
    api = FakeLibpod(sock)
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{sock}")
    monkeypatch.setenv("UNDERCLOUD_NODE_NETNS", "container:uc1-node-0")
    monkeypatch.setenv("UNDERCLOUD_AGENT_STATE", str(tmp_path / "state"))
    yield api
    api.server.shutdown()
    api.server.server_close()


def compute_pod(host_network=True, probe=None):
    return {"kind": "Pod", "metadata": {"name": "nova-compute"}, "spec": {
        "hostNetwork": host_network,
        "containers": [
            {"name": "libvirt", "image": "img:1", "securityContext": {"privileged": True},
             "volumeMounts": [{"name": "run", "mountPath": "/run/libvirt"}]},
            {"name": "compute", "image": "img:1", "readinessProbe": probe,
             "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
             "volumeMounts": [{"name": "run", "mountPath": "/run/libvirt"}]}],
        "volumes": [{"name": "run", "persistentVolumeClaim": {"claimName": "libvirt-run"}}]}}


def test_netns_mode_maps_privileged_and_gives_host_network_pods_the_nodes_hostname(libpod):
    netns.play_netns("nova-compute", compute_pod(), {})
    libvirt, compute = libpod.created()
    assert (libvirt["privileged"], compute["privileged"]) == (True, False)
    # hostNetwork: the node's network AND its UTS namespace (hostname = the node's name).
    for body in (libvirt, compute):
        assert body["netns"] == body["utsns"] == {"nsmode": "container", "value": "uc1-node-0"}
    # Both containers mount the one per-node claim volume.
    assert libvirt["volumes"][0]["Name"] == compute["volumes"][0]["Name"] == "uc1-node-0-libvirt-run"
    libpod.calls.clear()
    netns.play_netns("nova-compute", compute_pod(host_network=False), {})
    assert all("utsns" not in b for b in libpod.created())  # its own hostname, as in Kubernetes


@pytest.mark.parametrize("context, message", [
    ({"privileged": "yes"}, "securityContext.privileged: expected true or false, not 'yes'"),
    ("privileged", "securityContext: expected a map"),
])
def test_a_bad_privileged_is_one_line(env, context, message):
    pod = {"kind": "Pod", "metadata": {"name": "lv"},
           "spec": {"containers": [{"name": "c", "command": ["true"], "securityContext": context}]}}
    r = hooks.run(deployment({"kind": "List", "items": [pod]}), None, 30, env)
    assert r["deploy_status_code"] == 2
    assert r["deploy_stderr"] == f"kube: pod lv: spec.containers[0].{message}"


@pytest.mark.parametrize("probe, message", [
    ({"exec": {"command": "virsh version"}}, "readinessProbe.exec.command: expected a non-empty list"),
    ({"exec": {"command": []}}, "readinessProbe.exec.command: expected a non-empty list"),
    ({"exec": {"command": ["true"]}, "timeoutSeconds": 0}, "readinessProbe.timeoutSeconds: expected a whole number of seconds"),
    ({"tcpSocket": {"port": 1}, "periodSeconds": 0.5}, "readinessProbe.periodSeconds: expected a whole number of seconds"),
    ("true", "readinessProbe: expected a map with exec, httpGet or tcpSocket"),
])
def test_a_bad_probe_is_one_line_before_anything_runs(env, probe, message):
    pod = {"kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "command": ["true"], "readinessProbe": probe}]}}
    r = hooks.run(deployment({"kind": "List", "items": [pod]}), None, 30, env)
    assert r["deploy_status_code"] == 2
    assert r["deploy_stderr"].startswith(f"kube: pod p: spec.containers[0].{message}"), r["deploy_stderr"]


def test_netns_exec_probes_run_inside_the_container_through_the_exec_api(libpod):
    probe = {"exec": {"command": ["uc-nova-compute-ready", "--quiet"]}, "periodSeconds": 1}
    libpod.exec_results = [(1, "uc-nova-compute-ready: not mapped to a cell yet\n"), (0, "up\n")]
    r = hooks.run(deployment({"kind": "List", "items": [compute_pod(probe=probe)]}, {"ready_timeout": 10}),
                  None, 60, {k: os.environ[k] for k in ("CONTAINER_HOST", "UNDERCLOUD_NODE_NETNS",
                                                        "UNDERCLOUD_AGENT_STATE")} | {"PATH": "/usr/bin:/bin"})
    assert r["deploy_status_code"] == 0, r
    assert [(e["container"], e["argv"]) for e in libpod.execs.values()] == \
        [("uc1-node-0-nova-compute-compute", ["uc-nova-compute-ready", "--quiet"])] * 2


def test_a_failing_exec_probe_reports_what_it_said(libpod):
    probe = {"exec": {"command": ["uc-nova-compute-ready"]}, "periodSeconds": 1}
    libpod.exec_results = [(1, "starting\nuc-nova-compute-ready: the hypervisor of host node-0 is down\n")] * 50
    got = probes.wait_ready(compute_pod(probe=probe), 2.5, run_exec=lambda c: netns.NetnsEngine().exec_runner("nova-compute", c))
    assert got[0] == "compute"
    assert got[2] == "did not pass within 2.5 s; it said: uc-nova-compute-ready: the hypervisor of host node-0 is down"
    assert len(libpod.execs) == 3  # at 0, 1 and 2 s: every periodSeconds, not as fast as it can


def test_process_mode_runs_exec_probes_here(env, tmp_path):
    flag = tmp_path / "ready"
    pod = {"spec": {"containers": [{"name": "c", "readinessProbe": {"exec": {"command": ["test", "-e", str(flag)]}}}]}}
    assert probes.wait_ready(pod, 1)[2].startswith("did not pass within 1 s")
    flag.touch()
    assert probes.wait_ready(pod, 1) is None


FAKE_PODMAN = """#!/bin/sh
# kube play FILE: keep the played file; pod inspect: running; exec NAME ARGV: recorded.
echo "$*" >> "$FAKE_PODMAN_LOG"
case "$1 $2" in
  "kube play") cp "$4" "$FAKE_PODMAN_LOG.played" ;;
  "pod inspect") echo Running ;;
  "exec "*) [ -e "$FAKE_PODMAN_LOG.ready" ] || { touch "$FAKE_PODMAN_LOG.ready"; echo not yet; exit 1; } ;;
esac
"""


def test_podman_mode_plays_host_network_pods_with_the_nodes_hostname_and_execs_probes_inside(tmp_path):
    """Also: podman is not handed the livenessProbe (it would make it a health check with
    a 1 s timeout and restart the service itself); the agent keeps it for its watchdog."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(FAKE_PODMAN)
    (bin_dir / "podman").chmod(0o755)
    log = tmp_path / "podman.log"
    env = {"UNDERCLOUD_AGENT_STATE": str(tmp_path / "state"), "PATH": f"{bin_dir}:/usr/bin:/bin",
           "FAKE_PODMAN_LOG": str(log)}
    pod = compute_pod(probe={"exec": {"command": ["virsh", "version"]}, "periodSeconds": 1})
    alive = {"httpGet": {"port": 9200, "path": "/alive"}}
    pod["spec"]["containers"][1]["livenessProbe"] = alive
    r = hooks.run(deployment({"kind": "List", "items": [pod]}, {"kube_mode": "podman", "ready_timeout": 10}),
                  None, 60, env)
    assert r["deploy_status_code"] == 0, r
    played = [json.loads(d) for d in (tmp_path / "podman.log.played").read_text().split("\n---\n")]
    assert played[-1]["spec"]["hostname"] == socket.gethostname()
    assert [c["name"] for c in played[-1]["spec"]["containers"]] == ["libvirt", "compute"]
    assert not any("livenessProbe" in c for c in played[-1]["spec"]["containers"])
    kept = json.loads((tmp_path / "state" / "kube" / "nova-compute.json").read_text())
    assert kept["spec"]["containers"][1]["livenessProbe"] == alive
    execs = [line for line in log.read_text().splitlines() if line.startswith("exec ")]
    assert execs == ["exec nova-compute-compute virsh version"] * 2
    # A Pod that names its hostname keeps it; one without hostNetwork gets none.
    assert pod_spec.as_played({"spec": {"hostNetwork": True, "hostname": "x"}})["spec"]["hostname"] == "x"
    assert "hostname" not in pod_spec.as_played({"spec": {}})["spec"]


def test_exec_probes_default_to_2_s_then_back_off(libpod):
    """Each exec probe is a process in the container (and a lingering conmon through the
    podman API): without periodSeconds they run after 2 s, then 1.5 times as long after
    each failure (up to EXEC_SPACING_MAX), not every 0.5 s."""
    libpod.exec_results = [(1, "not yet")] * 20
    got = probes.wait_ready(compute_pod(probe={"exec": {"command": ["false"]}}), 5.5,
                          run_exec=lambda c: netns.NetnsEngine().exec_runner("nova-compute", c))
    assert got[2] == "did not pass within 5.5 s; it said: not yet"
    assert len(libpod.execs) == 3  # at 0, 2 and 5 s


def test_netns_empty_dir_is_one_volume_of_the_pod_shared_by_its_containers_and_emptied_at_each_play(libpod):
    pod = {"kind": "Pod", "metadata": {"name": "web"}, "spec": {
        "containers": [{"name": n, "image": "i", "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}
                       for n in ("a", "b")],
        "volumes": [{"name": "scratch", "emptyDir": {}}]}}
    pod_spec.validate(pod)
    netns.play_netns("web", pod, {})
    assert [b["volumes"] for b in libpod.created()] == [[{"Name": "uc1-node-0-web-scratch", "Dest": "/s",
                                                          "Options": []}]] * 2
    assert libpod.volumes["uc1-node-0-web-scratch"]["Label"] == {"undercloud.node": "uc1-node-0",
                                                                  "undercloud.pod": "uc1-node-0-web"}
    libpod.calls.clear()
    netns.play_netns("web", pod, {})  # replaced: the old volume goes, a new empty one comes
    vol_calls = [(m, p) for m, p, b in libpod.calls if p.startswith("/volumes/")]
    assert vol_calls == [("DELETE", "/volumes/uc1-node-0-web-scratch"), ("POST", "/volumes/create")]


def test_image_overrides_change_only_the_pods_that_use_those_images(monkeypatch):
    played = []
    monkeypatch.setattr(kube, "play_one", lambda pod, configmaps, eng, options: played.append(
        {c["name"]: c["image"] for c in pod["spec"]["containers"]}) or {"deploy_status_code": 0})

    def pod(name, image):
        return {"kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": name, "image": image}]}}
    cfg = {"kind": "List", "items": [pod("keystone", "svc-keystone:1"), pod("memcached", "svc-memcached:1")]}
    r = kube.hook_kube(deployment(cfg, {"kube_mode": "process", "image_overrides": {"svc-keystone:1": "svc-keystone:2",
                                                                                     "svc-other:1": "svc-other:2"}}))
    assert r["deploy_status_code"] == 0, r
    assert played == [{"keystone": "svc-keystone:2"}, {"memcached": "svc-memcached:1"}]
    bad = kube.hook_kube(deployment(cfg, {"kube_mode": "process", "image_overrides": {"svc-keystone:1": 3}}))
    assert bad["deploy_status_code"] == 2 and "options.image_overrides: a map of image -> image" in bad["deploy_stderr"]
    assert len(played) == 2  # nothing played


def test_waiting_looks_for_a_dead_container_every_two_seconds_not_every_round(monkeypatch):
    """Each look inspects the Pod's containers through the podman API the agents of every
    container node share: not a few calls a second per waiting Pod."""
    clock = [0.0]
    monkeypatch.setattr(probes.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(probes.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(probes, "probe", lambda spec, run_exec=None: (False, "not yet"))
    looks = []
    pod = {"spec": {"containers": [{"name": "c", "readinessProbe": {"httpGet": {"port": 1}}}]}}
    assert probes.wait_ready(pod, 10, dead=lambda: looks.append(clock[0])) is not None
    assert looks == [0.0, 2.0, 4.0, 6.0, 8.0]
