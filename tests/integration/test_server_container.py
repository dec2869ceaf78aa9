"""Container servers for real: podman system containers from the built `overcloud-full`
oci image, their agents checking in over the lab network, and nothing left after delete.

Needs root and podman (skips otherwise). The image comes from the image builder
(`undercloud image build overcloud-full --type oci`; cached after the first build).
Every test removes what its undercloud instance made (containers, volumes, network,
bridge), even when it fails.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.conftest import address_table, need, need_root, run_cli

SERVER = """\
heat_template_version: wallaby
parameters:
  flavor: {type: string, default: container}
resources:
  node:
    type: OS::Nova::Server
    properties:
      name: ctl0
      image: overcloud-full
      flavor: {get_param: flavor}
      persistent_volumes: [/var/lib/keep]
      user_data_format: RAW
      user_data: |
        #!/bin/sh
        echo "user data ran on $(hostname)" >> /var/lib/keep/user-data
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      outputs: [{name: who}]
      config: |
        #!/bin/sh
        hostname > $heat_outputs_path.who
        date +%s%N >> /var/lib/keep/runs
  deploy:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: node}
outputs:
  who: {value: {get_attr: [deploy, who]}}
  ip: {value: {get_attr: [node, first_address]}}
"""

TWO = """\
heat_template_version: wallaby
resources:
  a:
    type: OS::Nova::Server
    properties: {name: a, image: overcloud-full, flavor: container, metadata: {secret_of: a}}
  b:
    type: OS::Nova::Server
    properties: {name: b, image: overcloud-full, flavor: container, metadata: {secret_of: b}}
"""


def podman(*args: str) -> subprocess.CompletedProcess:
    from undercloud.host import podman as hp

    return hp.podman(*args, check=False)


def leftovers(instance: str) -> dict:
    """What an undercloud instance still has on the host."""
    label = f"label=undercloud.instance={instance}"
    return {
        "containers": podman("ps", "-a", "-q", "--filter", label).stdout.split(),
        "volumes": podman("volume", "ls", "-q", "--filter", label).stdout.split(),
        "network": podman("network", "ls", "-q", "--filter", label).stdout.split() != [],  # lab and provider
        "bridge": subprocess.run(["ip", "link", "show", f"{instance}-br"], capture_output=True).returncode == 0,
    }


def remove_instance(instance: str) -> None:
    """Remove whatever an undercloud instance left on the host, even after a failed test."""
    label = f"label=undercloud.instance={instance}"
    for c in podman("ps", "-a", "-q", "--filter", label).stdout.split():
        podman("rm", "-f", "-t", "0", c)
    for v in podman("volume", "ls", "-q", "--filter", label).stdout.split():
        podman("volume", "rm", "-f", v)
    for n in podman("network", "ls", "-q", "--filter", label).stdout.split():
        podman("network", "rm", "-f", n)  # lab and provider
    subprocess.run(["ip", "link", "del", f"{instance}-br"], capture_output=True)


@pytest.fixture
def uc(uc_home):
    need("podman")
    need_root()
    from undercloud.host import podman as hp

    why = hp.available()
    if why:
        pytest.skip(f"podman does not work here: {why}")
    instance = uc_home.instance
    try:
        r = run_cli("image", "build", "overcloud-full", "--type", "oci", timeout=1800)
        assert r.returncode == 0, r.stderr[-2000:]
        yield uc_home
    finally:
        run_cli("service", "stop")
        remove_instance(instance)


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def show(ref: str) -> dict:
    r = run_cli("server", "show", ref, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_checked_in(ref: str, timeout: float = 60, after: float = 0.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        srv = show(ref)
        if srv["agent_checked_in"] and (srv["agent_last_seen"] or 0) > after:
            return srv
        assert time.monotonic() < deadline, f"agent of {ref} did not check in: {srv}"
        time.sleep(0.5)


def test_container_server_stack_create_check_in_delete_leaves_nothing(uc, tmp_path):
    tpl = write(tmp_path, "server.yaml", SERVER)
    r = run_cli("stack", "create", "s1", "-t", tpl, "--wait", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    srv = wait_checked_in("ctl0")
    assert srv["status"] == "ACTIVE" and srv["hypervisor_type"] == "container"
    ip = srv["addresses"]["ctlplane"][0]
    # The deployment ran inside the container (hostname = server name) and signalled back.
    out = json.loads(run_cli("stack", "output", "show", "s1", "--all", "-f", "json").stdout)
    values = {o["output_key"]: o["output_value"] for o in out}
    assert values["who"].strip() == "ctl0" and values["ip"] == ip
    name = srv["instance_name"]
    assert name == f"{uc.instance}-ctl0"
    inspect = json.loads(podman("inspect", name).stdout)[0]
    assert inspect["Config"]["Hostname"] == "ctl0"
    pid1 = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
    assert pid1[:3] == ["python3", "-m", "undercloud.agent"]  # the agent is the main process
    assert podman("exec", name, "cat", "/var/lib/keep/user-data").stdout == "user data ran on ctl0\n"
    # The node's namespace (its services' too) has a short TCP keepalive: a connection whose
    # peer vanished with a lost node ends in seconds.
    keepalive = podman("exec", name, "cat", "/proc/sys/net/ipv4/tcp_keepalive_time",
                       "/proc/sys/net/ipv4/tcp_keepalive_intvl", "/proc/sys/net/ipv4/tcp_keepalive_probes")
    assert keepalive.stdout.split() == ["10", "2", "3"], keepalive.stderr
    mounts = {m["Destination"]: m for m in inspect["Mounts"]}
    assert mounts["/etc/undercloud-agent"]["RW"] is False  # first-boot data read-only
    if not any("not enforced" in n for n in srv["notes"]):
        assert inspect["HostConfig"]["Memory"] == 512 * 1024 * 1024
    console = run_cli("server", "console", "ctl0")
    assert "undercloud-agent: started" in console.stdout
    assert json.loads(run_cli("stack", "output", "show", "s1", "--all", "-f", "json").stdout)

    r = run_cli("stack", "delete", "s1", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}
    addrs = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True).stdout
    assert ip not in addrs and srv["id"] not in json.dumps(json.loads(run_cli("agent", "list", "-f", "json").stdout))


def test_a_server_token_cannot_read_another_servers_metadata(uc, tmp_path):
    r = run_cli("stack", "create", "two", "-t", write(tmp_path, "two.yaml", TWO), "--wait", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = wait_checked_in("a"), wait_checked_in("b")
    probe = ("import json,ssl,sys,urllib.request,urllib.error\n"
             "c=json.load(open('/etc/undercloud-agent/config.json'))\n"
             "tls=ssl.create_default_context(cadata=c['ca'])\n"  # as the agent: the undercloud's CA
             "def get(sid):\n"
             "  req=urllib.request.Request(c['url']+'/v1/agent/servers/'+sid+'/metadata',"
             "headers={'X-Server-Token':c['token']})\n"
             "  try: r=urllib.request.urlopen(req,timeout=5,context=tls); return r.status, json.load(r).get('secret_of')\n"
             "  except urllib.error.HTTPError as e: return e.code, None\n"
             "print(json.dumps([get(sys.argv[1]), get(sys.argv[2])]))\n")
    out = podman("exec", a["instance_name"], "python3", "-c", probe, a["id"], b["id"])
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[200, "a"], [401, None]]
    # `server delete` removes b (container and credentials); the stack's delete copes after.
    r = run_cli("server", "delete", "b")
    assert r.returncode == 0 and "b: deleted" in r.stderr, r.stderr
    assert podman("container", "exists", b["instance_name"]).returncode != 0
    assert [s["name"] for s in json.loads(run_cli("server", "list", "-f", "json").stdout)] == ["a"]
    assert b["id"] not in run_cli("agent", "list", "-f", "value").stdout
    r = run_cli("stack", "delete", "two", "--wait", timeout=300)
    assert r.returncode == 0, r.stderr
    assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}


def test_power_rebuild_keeps_volumes_and_agents_find_the_undercloud_after_restart(uc, tmp_path):
    r = run_cli("stack", "create", "s1", "-t", write(tmp_path, "server.yaml", SERVER), "--wait", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    srv = wait_checked_in("ctl0")
    name = srv["instance_name"]
    # A service container joined to the node's namespace, as the kube hook makes them: power
    # is the whole node's, it stops and starts with it.
    image = json.loads(podman("inspect", name).stdout)[0]["ImageName"]
    svc = podman("run", "-d", "--name", f"{name}-svc", "--label", f"undercloud.node={name}", "--runtime", "runc",
                 "--network", f"container:{name}", image, "sleep", "infinity")
    assert svc.returncode == 0, svc.stderr
    assert json.loads(run_cli("server", "power", "off", "ctl0", "-f", "json").stdout)["status"] == "SHUTOFF"
    assert json.loads(podman("inspect", name).stdout)[0]["State"]["Running"] is False
    assert json.loads(podman("inspect", f"{name}-svc").stdout)[0]["State"]["Running"] is False
    assert json.loads(run_cli("server", "power", "on", "ctl0", "-f", "json").stdout)["status"] == "ACTIVE"
    assert json.loads(podman("inspect", f"{name}-svc").stdout)[0]["State"]["Running"] is True
    # User data runs at the first boot only, not again after a power cycle (a rebuilt server,
    # with a fresh root, runs it again: the volume then holds two lines).
    assert podman("exec", name, "cat", "/var/lib/keep/user-data").stdout == "user data ran on ctl0\n"
    r = run_cli("server", "rebuild", "ctl0", "-f", "json")
    assert r.returncode == 0, r.stderr
    rebuilt = wait_checked_in("ctl0", after=srv["agent_last_seen"])
    assert rebuilt["id"] == srv["id"]
    # The deployment ran again in the new container; the volume kept the first run's line.
    deadline = time.monotonic() + 60
    while len(podman("exec", name, "cat", "/var/lib/keep/runs").stdout.split()) < 2:
        assert time.monotonic() < deadline, "the rebuilt server did not run its deployment again"
        time.sleep(0.5)
    assert podman("exec", name, "cat", "/var/lib/keep/user-data").stdout == "user data ran on ctl0\n" * 2
    # Restart the undercloud: the agent finds it again at the same address and port.
    assert run_cli("service", "stop").returncode == 0
    back = wait_checked_in("ctl0", after=time.time())  # this command starts the service again
    assert back["addresses"] == srv["addresses"]
    run_cli("stack", "delete", "s1", "--wait", timeout=300)
    assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}


def test_image_hypervisor_mismatch_is_one_line_and_leaves_nothing(uc, tmp_path):
    tpl = write(tmp_path, "server.yaml", SERVER)
    r = run_cli("stack", "create", "bad", "-t", tpl, "--parameter", "flavor=vm", "--wait", timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "no vm image named 'overcloud-full'" in r.stderr and "exists for: container (oci)" in r.stderr
    assert json.loads(run_cli("server", "list", "-f", "json").stdout) == []
    assert leftovers(uc.instance)["containers"] == []


def test_realiser_create_is_idempotent_and_delete_repeatable(uc, tmp_path):
    """What a create resumed after a crash relies on: the container is found by its label."""
    from undercloud.config import Home
    from undercloud.provisioning.servers.base import Env, Spec
    from undercloud.provisioning.servers.container import ContainerRealiser

    (img,) = json.loads(run_cli("image", "list", "--name", "overcloud-full", "--hypervisor-type", "container",
                                "-f", "json").stdout)
    fb = Home(uc.path).path / "servers" / "s-idem" / "first-boot"
    fb.mkdir(parents=True)
    (fb / "config.json").write_text("{}")
    r = ContainerRealiser(Env(home=Home(uc.path), api_port=1, addresses=address_table(uc)))
    spec = Spec(id="s-idem", name="idem", hypervisor_type="container", flavor={"vcpus": 1, "ram": 128},
                image=img, image_path=None, first_boot={}, networks=[], volumes=[{"name": "v", "path": "/v"}])
    try:
        r.create(spec)
        again = Spec(**{**spec.__dict__, "state": {}})  # as after a crash: nothing remembered
        r.create(again)
        assert len(podman("ps", "-a", "-q", "--filter", "label=undercloud.server=s-idem").stdout.split()) == 1
        assert again.state["instance_name"] == spec.state["instance_name"] == f"{uc.instance}-idem"
        # The agent has an empty config: it exits, and the status says why, naming the container.
        deadline = time.monotonic() + 30
        while (st := r.status(spec)).status != "ERROR":
            assert time.monotonic() < deadline, st
            time.sleep(0.3)
        assert f"container {uc.instance}-idem exited (code 2)" in st.reason and "url: required" in st.reason
    finally:
        r.delete(spec)
        r.delete(spec)  # gone already: no error
        assert r.status(spec).status == "DELETED"
        assert f"{uc.instance}-lab" in r.cleanup()  # the bridge may have gone with the container
    assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}


def test_two_undercloud_homes_run_servers_of_the_same_name_side_by_side(uc, tmp_path):
    from undercloud.config import Home

    other = Home((tmp_path / "other-home").resolve())
    env = {"UNDERCLOUD_HOME": str(other.path)}
    tpl = write(tmp_path, "server.yaml", SERVER)
    try:
        r = run_cli("image", "build", "overcloud-full", "--type", "oci", env=env, timeout=1800)
        assert r.returncode == 0, r.stderr[-2000:]
        for e in ({}, env):
            r = run_cli("stack", "create", "s1", "-t", tpl, "--wait", env=e, timeout=300)
            assert r.returncode == 0, r.stderr[-2000:]
        mine = wait_checked_in("ctl0")
        deadline = time.monotonic() + 60
        while not (theirs := json.loads(run_cli("server", "show", "ctl0", "-f", "json", env=env).stdout))[
                "agent_checked_in"]:
            assert time.monotonic() < deadline, theirs
            time.sleep(0.5)
        assert mine["instance_name"] != theirs["instance_name"]
        assert mine["addresses"] != theirs["addresses"]  # each home its own lab network
        assert leftovers(other.instance)["containers"] and leftovers(uc.instance)["containers"]
        assert run_cli("stack", "delete", "s1", "--wait", env=env, timeout=300).returncode == 0
        assert leftovers(other.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}
        assert wait_checked_in("ctl0", after=mine["agent_last_seen"])["status"] == "ACTIVE"  # untouched
    finally:
        run_cli("service", "stop", env=env)
        remove_instance(other.instance)


ONE = """\
heat_template_version: wallaby
resources:
  node:
    type: OS::Nova::Server
    properties:
      name: ctl0
      image: overcloud-full
      flavor: container
      scheduler_hints: {"capabilities:hypervisor_hostname": host-b}
"""


def test_a_server_on_another_host_is_run_by_that_hosts_worker(uc, tmp_path):
    """Two hosts' workers on one store (both on this machine; UNDERCLOUD_HOST names the
    second one's host host-b): a stack the first service runs places its server on host-b
    (pinned by a scheduler hint) and host-b's worker makes it; asked through the first
    service, show, console and power are done by host-b's worker; with it stopped they wait
    for that host, but for the stack's delete, done at once (Nova's local delete): host-b's
    worker, started again, removes the container, its volumes and network first thing."""
    import os
    import signal
    import sys

    from tests.conftest import own_store_url
    from undercloud import daemon
    from undercloud.config import Home

    b = Home((tmp_path / "host-b-home").resolve())
    env_b = {"UNDERCLOUD_HOME": str(b.path), "UNDERCLOUD_STORE_KEY": str(uc.path / "store.key"),
             "UNDERCLOUD_HOST": "host-b"}
    db = own_store_url(uc.path / "undercloud.db")

    def start_b():
        log = open(tmp_path / "host-b.log", "a")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "undercloud", "serve", "--worker", "--db", db],
                                env={**os.environ, **env_b}, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not daemon.health(b, timeout=1):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "host-b.log").read_text()
            time.sleep(0.2)
        return proc, log

    def stop_b(proc, log):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()

    assert run_cli("service", "start").returncode == 0
    proc = None
    try:
        proc = start_b()
        r = run_cli("stack", "create", "sb", "-t", write(tmp_path, "one.yaml", ONE), "--wait", timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        srv = wait_checked_in("ctl0")  # asked through the first service: host-b's worker answers
        assert srv["host"] == "host-b" and srv["status"] == "ACTIVE"
        assert srv["instance_name"] == f"{b.instance}-ctl0"  # made by host-b's worker
        assert (b.path / "servers" / srv["id"] / "first-boot" / "config.json").exists()  # and its first boot

        def hosts():
            return {(h["name"], h["hypervisor_type"]): h for h in
                    json.loads(run_cli("server", "hypervisors", "-f", "json").stdout)}
        assert hosts()[("host-b", "container")]["servers"] == 1
        assert hosts()[("host-b", "container")]["state"] == "up"
        assert "undercloud-agent: started" in run_cli("server", "console", "ctl0").stdout
        off = run_cli("server", "power", "off", "ctl0", "-f", "json")
        assert off.returncode == 0 and json.loads(off.stdout)["status"] == "SHUTOFF", off.stderr
        assert json.loads(podman("inspect", srv["instance_name"]).stdout)[0]["State"]["Running"] is False
        assert json.loads(run_cli("server", "power", "on", "ctl0", "-f", "json").stdout)["status"] == "ACTIVE"

        stop_b(*proc)
        proc = None
        assert hosts()[("host-b", "container")]["state"] == "down"
        r = run_cli("server", "power", "off", "ctl0")
        assert r.returncode != 0 and "server: server ctl0 runs on host host-b, where no undercloud worker is alive" \
            in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert show("ctl0")["status"] == "ACTIVE"  # as last known
        assert json.loads(podman("inspect", srv["instance_name"]).stdout)[0]["State"]["Running"] is True

        # Deleted while host-b is down (Nova's local delete): the stack is not held up...
        r = run_cli("stack", "delete", "sb", "--wait", timeout=300)  # run by the first service's engine
        assert r.returncode == 0, r.stderr
        assert json.loads(run_cli("server", "list", "-f", "json").stdout) == []
        assert json.loads(podman("inspect", srv["instance_name"]).stdout)[0]["State"]["Running"] is True
        # ...and host-b's worker, back, removes the machine before anything else
        proc = start_b()
        assert leftovers(b.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}
        assert "removed the machines of servers deleted while this host was down: ctl0" in \
            (tmp_path / "host-b.log").read_text()
        stop_b(*proc)
        proc = None
        r = run_cli("server", "hypervisors", "--forget", "host-b", "-f", "json")  # retired
        assert r.returncode == 0 and "host-b" not in {h["name"] for h in json.loads(r.stdout)}, r.stderr
    finally:
        if proc is not None:
            stop_b(*proc)
        remove_instance(b.instance)


def test_limits_refused_by_cgroups_run_without_and_say_so(uc, monkeypatch):
    """Hosts whose cgroups cannot enforce --cpus/--memory: the server still runs, and says so.
    This host enforces them, so the refusal is injected into the first `podman run` only."""
    from undercloud.config import Home
    from undercloud.host.run import CommandFailed
    from undercloud.provisioning.servers import container
    from undercloud.provisioning.servers.base import Env, Spec

    real = container.hp.podman

    def podman_refusing_limits(*args, **kw):
        if args[:1] == ("run",) and "--memory" in args:
            raise CommandFailed(["podman", *args], 126, "runc create failed: cgroup memory controller missing")
        return real(*args, **kw)

    monkeypatch.setattr(container.hp, "podman", podman_refusing_limits)
    (img,) = json.loads(run_cli("image", "list", "--name", "overcloud-full", "--hypervisor-type", "container",
                                "-f", "json").stdout)
    fb = Home(uc.path).path / "servers" / "s-lim" / "first-boot"
    fb.mkdir(parents=True)
    (fb / "config.json").write_text("{}")
    r = container.ContainerRealiser(Env(home=Home(uc.path), api_port=1, addresses=address_table(uc)))
    spec = Spec(id="s-lim", name="lim", hypervisor_type="container", flavor={"vcpus": 1, "ram": 128},
                image=img, image_path=None, first_boot={}, networks=[])
    try:
        r.create(spec)
        info = json.loads(real("inspect", spec.state["instance_name"]).stdout)[0]
        assert info["HostConfig"]["Memory"] == 0  # ran without the limit
        st = r.status(spec)
        assert any("limits of the flavor are not enforced" in n and "cgroup memory controller missing" in n
                   for n in st.notes), st
    finally:
        r.delete(spec)
        r.cleanup()
    assert leftovers(uc.instance)["containers"] == []


GROUP = """\
heat_template_version: wallaby
resources:
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: 8
      resource_def:
        type: OS::Nova::Server
        properties: {name: node%index%, image: overcloud-full, flavor: container}
"""


def test_service_killed_mid_create_resumes_without_a_second_container(uc, tmp_path):
    """SIGKILL the service while container servers are being made: the next command starts
    it again, the create resumes, and every server has exactly one container."""
    import os
    import signal

    from undercloud import daemon

    r = run_cli("stack", "create", "crash", "-t", write(tmp_path, "group.yaml", GROUP))
    assert r.returncode == 0, r.stderr
    label = f"label=undercloud.instance={uc.instance}"
    deadline = time.monotonic() + 60
    while not podman("ps", "-a", "-q", "--filter", label).stdout.split():
        assert time.monotonic() < deadline, "no container appeared"
        time.sleep(0.05)
    pid = daemon.pid(uc)
    os.kill(pid, signal.SIGKILL)
    made_before = len(podman("ps", "-a", "-q", "--filter", label).stdout.split())
    deadline = time.monotonic() + 300
    while (st := json.loads(run_cli("stack", "show", "crash", "-f", "json").stdout))["stack_status"] \
            != "CREATE_COMPLETE":
        assert not st["stack_status"].endswith("FAILED"), st["stack_status_reason"]
        assert time.monotonic() < deadline, st
        time.sleep(1)
    assert daemon.pid(uc) != pid
    servers = json.loads(run_cli("server", "list", "-f", "json").stdout)
    assert sorted(s["name"] for s in servers) == [f"node{i}" for i in range(8)]
    for s in servers:
        assert len(podman("ps", "-a", "-q", "--filter", f"label=undercloud.server={s['id']}").stdout.split()) == 1
        wait_checked_in(s["id"])
    assert len(podman("ps", "-a", "-q", "--filter", label).stdout.split()) == 8
    print(f"killed with {made_before}/8 containers made")
    assert run_cli("stack", "delete", "crash", "--wait", timeout=300).returncode == 0
    assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}


SPANNED = """\
heat_template_version: wallaby
resources:
  a:
    type: OS::Nova::Server
    properties: {name: span-a, image: overcloud-full, flavor: container}
  b:
    type: OS::Nova::Server
    depends_on: a  # this host's network first: host-b joins it
    properties:
      name: span-b
      image: overcloud-full
      flavor: container
      scheduler_hints: {"capabilities:hypervisor_hostname": host-b}
  serve:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      outputs: [{name: sum}]
      config: |
        #!/bin/sh
        set -e
        mkdir -p /srv/span && head -c 300000 /dev/urandom > /srv/span/blob
        cd /srv/span && setsid -f python3 -m http.server 8080 > /dev/null 2>&1 < /dev/null
        sha256sum /srv/span/blob | cut -d' ' -f1 | tr -d '\\n' > $heat_outputs_path.sum
  serving:
    type: OS::Heat::SoftwareDeployment
    properties: {config: {get_resource: serve}, server: {get_resource: a}}
  fetch:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: there}]
      outputs: [{name: sum}]
      config: |
        #!/usr/bin/python3
        import hashlib, os, time, urllib.request
        for _ in range(90):
            try:
                data = urllib.request.urlopen(f"http://{os.environ['there']}:8080/blob", timeout=5).read()
                break
            except OSError as exc:
                error = exc
                time.sleep(1)
        else:
            raise SystemExit(f"{os.environ['there']}:8080 did not answer: {error}")
        with open(os.environ["heat_outputs_path"] + ".sum", "w") as f:
            f.write(hashlib.sha256(data).hexdigest())
  fetched:
    type: OS::Heat::SoftwareDeployment
    depends_on: serving
    properties:
      config: {get_resource: fetch}
      server: {get_resource: b}
      input_values: {there: {get_attr: [a, first_address]}}
outputs:
  served: {value: {get_attr: [serving, sum]}}
  fetched: {value: {get_attr: [fetched, sum]}}
  a: {value: {get_attr: [a, first_address]}}
  b: {value: {get_attr: [b, first_address]}}
"""


def test_servers_of_two_hosts_share_one_lab_network_through_a_tunnel(uc, tmp_path):
    """A second host (host-b: a worker in a network namespace of its own, reached over a veth
    pair, with podman network configs of its own, as another machine on a network) joins this
    host's lab network
    (UNDERCLOUD_LAB_NETWORK): its container server gets an address of the same subnet from the
    same address table, its agent checks in with host-b's worker at host-b's own address there,
    and it fetches 300 kB over plain TCP from a server on this host through the VXLAN between
    the two bridges (frames of 1500 bytes, fragmented below them). Deleting the stack removes
    the tunnels with the networks."""
    import ipaddress
    import os
    import signal
    import sys
    import urllib.request

    from tests.conftest import own_store_url
    from undercloud.config import Home
    from undercloud.host import podman as hp
    from undercloud.provisioning.servers.container import HOST_SOCKET

    ns, here, there = f"uc-span-{os.getpid()}", "172.31.251.1", "172.31.251.2"
    veth = f"ucsp{os.getpid() % 100000}"
    b = Home((tmp_path / "host-b-home").resolve())
    proc = log = None

    def sh(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True)

    def in_ns(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *argv], capture_output=True, text=True)

    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}b")
        sh("ip", "link", "set", f"{veth}b", "netns", ns)
        sh("ip", "addr", "add", f"{here}/24", "dev", veth)
        sh("ip", "link", "set", veth, "up")
        assert in_ns("ip", "addr", "add", f"{there}/24", "dev", f"{veth}b").returncode == 0
        assert in_ns("ip", "link", "set", f"{veth}b", "up").returncode == 0
        assert in_ns("ip", "link", "set", "lo", "up").returncode == 0
        # this host's service, reached by host-b at `here`; host-b's worker in its namespace
        run_cli("service", "stop")  # started by the fixture's image build, on loopback only
        assert run_cli("service", "start", env={"UNDERCLOUD_LISTEN": here}).returncode == 0
        mine = f"{uc.instance}-lab"
        log = open(tmp_path / "host-b.log", "a")  # noqa: SIM115 - closed below
        env = {**os.environ, "UNDERCLOUD_HOME": str(b.path), "UNDERCLOUD_STORE_KEY": str(uc.path / "store.key"),
               "UNDERCLOUD_HOST": "host-b", "UNDERCLOUD_LAB_NETWORK": mine,
               "UNDERCLOUD_HYPERVISOR_TYPES": "container"}
        # Another machine has podman network configs of its own: a mount over the directory
        # in a mount namespace of host-b's. That namespace keeps /run/netns shared with this
        # host's (made shared by `ip netns add`; only / is made a slave), so the network
        # namespaces podman makes there for host-b's containers are seen here: podman on this
        # host (which lists every container of the machine) works while they exist, and
        # removes them if the test fails. The API service runs in this host's namespaces
        # before host-b's worker would start one inside its own.
        hp.api_service(HOST_SOCKET)
        configs = tmp_path / "host-b-networks"
        configs.mkdir()
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--propagation", "unchanged",
                                 "sh", "-c", 'mount --make-slave / && mount --bind "$0" /etc/containers/networks'
                                 ' && exec "$@"', str(configs),
                                 sys.executable, "-m", "undercloud", "serve", "--worker",
                                 "--db", own_store_url(uc.path / "undercloud.db"), "--listen", there],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://{there}:{b.api_port()}/v1/health", timeout=1)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "host-b.log").read_text()
                time.sleep(0.3)

        r = run_cli("stack", "create", "span", "-t", write(tmp_path, "span.yaml", SPANNED), "--wait", timeout=600)
        assert r.returncode == 0, r.stderr[-2000:] + (tmp_path / "host-b.log").read_text()[-2000:]
        out = {o["output_key"]: o["output_value"] for o in
               json.loads(run_cli("stack", "output", "list", "span", "-f", "json").stdout)}
        assert len(out["served"]) == 64 and out["fetched"] == out["served"], out
        subnet = ipaddress.ip_network(json.loads((uc.path / "servers" / "container-network.json").read_text())["subnet"])
        assert ipaddress.ip_address(out["a"]) in subnet and ipaddress.ip_address(out["b"]) in subnet
        b_server = wait_checked_in("span-b")
        assert b_server["host"] == "host-b" and b_server["instance_name"] == f"{b.instance}-span-b"
        # podman here sees host-b's container whole (its network namespace too)
        assert podman("inspect", b_server["instance_name"], "--format", "{{.State.Status}}").stdout.strip() == "running"
        assert podman("ps", "-a").returncode == 0
        # one address table: host-b's worker holds an address of its own there, its server another
        held = address_table(uc).on(mine)
        assert held[out["b"]] == b_server["id"] and "host:host-b" in held.values()
        b_address = next(a for a, h in held.items() if h == "host:host-b")
        bridge = in_ns("ip", "-o", "-4", "addr", "show", "dev", f"{b.instance}-br").stdout
        assert f"{b_address}/{subnet.prefixlen}" in bridge and f" {subnet.network_address + 1}/" not in bridge
        # `server network` shows the network and the hosts on it, where their tunnels end
        shown = json.loads(run_cli("server", "network", "-f", "json").stdout)
        assert (shown["network"], shown["subnet"]) == (mine, str(subnet))
        assert {(h["host"], h["endpoint"], h["address"]) for h in shown["hosts"]} >= {("host-b", there, b_address)}
        assert here in {h["endpoint"] for h in shown["hosts"]}
        # each side's tunnel floods to the other
        from undercloud.host import tunnel

        assert tunnel.peers(f"{uc.instance}-vx") == {there}
        assert f"dst {here}" in in_ns("bridge", "fdb", "show", "dev", f"{b.instance}-vx").stdout

        assert run_cli("stack", "delete", "span", "--wait", timeout=300).returncode == 0
        assert leftovers(uc.instance) == {"containers": [], "volumes": [], "network": False, "bridge": False}
        assert subprocess.run(["ip", "link", "show", f"{uc.instance}-vx"], capture_output=True).returncode != 0
        assert in_ns("ip", "link", "show", f"{b.instance}-vx").returncode != 0
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if log is not None:
            log.close()
        remove_instance(b.instance)
        subprocess.run(["ip", "link", "del", f"{uc.instance}-vx"], capture_output=True)
        subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
