"""uc-rabbitmq-start: how a RabbitMQ node starts, alone or in the overcloud's cluster, decided
from what it and its peers tell (`choose`, a pure function; peers as their /state would
answer): with its own data it rejoins (the latest holder starting alone when a peer was
replaced); without, it joins a running peer, or forms the cluster only when every peer says
it holds none and it is the first node; otherwise it waits and says for what, holding its
liveness port. tests/integration/test_rabbitmq_cluster.py runs it for real, three containers."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path

import pytest

import undercloud

SCRIPT = Path(undercloud.__file__).parent / "images" / "elements" / "rabbitmq" / "static" / "usr" / "local" / "bin" \
    / "uc-rabbitmq-start"
NODES = ["10.0.0.2", "10.0.0.3", "10.0.0.4"]


class Waits(Exception):
    pass


@pytest.fixture
def script(tmp_path, monkeypatch):
    loader = importlib.machinery.SourceFileLoader("uc_rabbitmq_start", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    monkeypatch.setattr(module, "MNESIA", str(tmp_path / "mnesia"))
    monkeypatch.setattr(module, "ENV_CONF", str(tmp_path / "rabbitmq-env.conf"))
    monkeypatch.setattr(module, "CONF", str(tmp_path / "rabbitmq.conf"))
    module.logged = []
    monkeypatch.setattr(module, "log", module.logged.append)

    def sleep(_s):
        raise Waits(module.logged[-1])

    monkeypatch.setattr(module.time, "sleep", sleep)
    return module


def fresh():
    """A peer that tells it holds no data (waiting to decide, as on a first deploy)."""
    return {"running": False, "state": {"data": False, "written": 0.0, "phase": "waiting"}}


def holder(written, phase="started"):
    return {"running": False, "state": {"data": True, "written": written, "phase": phase}}


RUNNING = {"running": True, "state": None}
SILENT = {"running": False, "state": None}
EMPTY = {"data": False, "written": 0.0}


def choose(script, me, peers, own=EMPTY, waited=0.0, running_for=0.0):
    return script.choose(NODES, me, own, peers, waited, running_for)


def test_a_first_deploy_forms_one_cluster_on_the_first_node_once_every_peer_says_it_has_no_data(script):
    assert choose(script, "10.0.0.2", {"10.0.0.3": fresh(), "10.0.0.4": fresh()}) == ("form", None)
    assert choose(script, "10.0.0.3", {"10.0.0.2": fresh(), "10.0.0.4": fresh()}) == (
        "wait", "a first deploy (no node holds data): waiting for 10.0.0.2 to form the cluster")
    assert choose(script, "10.0.0.4", {"10.0.0.2": RUNNING, "10.0.0.3": fresh()}) == ("join", "10.0.0.2")
    # a peer that has not told yet may hold the data: the first node forms nothing
    how, why = choose(script, "10.0.0.2", {"10.0.0.3": fresh(), "10.0.0.4": SILENT})
    assert how == "wait" and "10.0.0.4 not telling whether they hold data yet" in why


def test_a_replaced_node_waits_for_a_peer_with_data_and_joins_it_once_it_runs(script):
    # every controller was down; the first, replaced (no data), starts before the others
    how, why = choose(script, "10.0.0.2", {"10.0.0.3": SILENT, "10.0.0.4": SILENT})
    assert how == "wait" and "10.0.0.3, 10.0.0.4 not telling" in why
    assert choose(script, "10.0.0.2", {"10.0.0.3": holder(5.0, "waiting"), "10.0.0.4": fresh()}) == (
        "wait", "no data here; the cluster's data is on 10.0.0.3: waiting for one of them to run")
    # one holder runs, the other still starts: the joiner waits for it (rejoining after the
    # forget, it would bring the former node of this name back: seen in CI, the new node then
    # started as a cluster of its own), up to JOIN_PATIENCE
    how, why = choose(script, "10.0.0.2", {"10.0.0.3": holder(5.0), "10.0.0.4": RUNNING})
    assert how == "wait" and "10.0.0.4 running, 10.0.0.3 holding the cluster's data still starting" in why
    assert choose(script, "10.0.0.2", {"10.0.0.3": holder(5.0), "10.0.0.4": RUNNING},
                  running_for=script.JOIN_PATIENCE) == ("join", "10.0.0.4")
    assert choose(script, "10.0.0.2", {"10.0.0.3": RUNNING, "10.0.0.4": RUNNING}) == ("join", "10.0.0.3")
    # the first node replaced while the others run: it joins them, never forms a second cluster
    assert choose(script, "10.0.0.2", {"10.0.0.3": SILENT, "10.0.0.4": RUNNING}) == ("join", "10.0.0.4")


def test_nodes_with_data_come_back_and_the_latest_starts_alone_when_a_peer_was_replaced(script):
    mine = {"data": True, "written": 7.0}
    # a peer runs, or every peer holds data: RabbitMQ's own rejoin does it
    assert choose(script, "10.0.0.3", {"10.0.0.2": RUNNING, "10.0.0.4": SILENT}, mine) == ("rejoin", None)
    assert choose(script, "10.0.0.3", {"10.0.0.2": holder(9.0), "10.0.0.4": holder(1.0)}, mine) == ("rejoin", None)
    # a peer has no data (replaced): the holder that wrote last starts without waiting, the other rejoins it
    assert choose(script, "10.0.0.3", {"10.0.0.2": fresh(), "10.0.0.4": holder(5.0)}, mine) == ("force", None)
    assert choose(script, "10.0.0.4", {"10.0.0.2": fresh(), "10.0.0.3": holder(7.0)},
                  {"data": True, "written": 5.0}) == ("rejoin", None)
    # ties go to the first of the list; the only holder left is the latest
    assert choose(script, "10.0.0.4", {"10.0.0.2": fresh(), "10.0.0.3": holder(7.0)}, mine) == ("rejoin", None)
    assert choose(script, "10.0.0.3", {"10.0.0.2": fresh(), "10.0.0.4": fresh()}, mine) == ("force", None)


def test_a_node_with_data_waits_a_while_for_silent_peers_then_starts_as_it_is(script):
    mine = {"data": True, "written": 7.0}
    how, why = choose(script, "10.0.0.3", {"10.0.0.2": fresh(), "10.0.0.4": SILENT}, mine)
    assert how == "wait" and f"10.0.0.4 not telling theirs yet: waiting up to {script.HOLDER_PATIENCE} s" in why
    assert choose(script, "10.0.0.3", {"10.0.0.2": fresh(), "10.0.0.4": SILENT}, mine,
                  waited=script.HOLDER_PATIENCE) == ("rejoin", None)


def test_the_node_tells_its_own_data_and_when_it_wrote_it(script):
    assert script.own_state("10.0.0.3") == {"data": False, "written": 0.0, "phase": "waiting"}
    # data of another node name (rabbit@localhost, before it was a cluster) is not its data
    (Path(script.MNESIA) / "rabbit@localhost").mkdir(parents=True)
    (Path(script.MNESIA) / "rabbit@localhost" / "schema.DAT").write_text("x")
    assert script.own_state("10.0.0.3")["data"] is False
    mine = Path(script.MNESIA) / "rabbit@10.0.0.3"
    mine.mkdir()
    (mine / "schema.DAT").write_text("x")
    os.utime(mine / "schema.DAT", (1000.0, 1000.0))
    (mine / "quorum").mkdir()
    assert script.own_state("10.0.0.3") == {"data": True, "written": 1000.0, "phase": "waiting"}


def test_a_waiting_node_says_what_it_waits_for_and_asks_no_cli(script, monkeypatch):
    script.answers = lambda address: False
    script.peer_state = lambda address: None
    monkeypatch.setattr(script, "ctl", lambda *a, **k: pytest.fail("a CLI call while deciding"))
    with pytest.raises(Waits) as waits:
        script.decide(NODES, "10.0.0.2")
    assert str(waits.value).startswith("no data here and no peer running; 10.0.0.3, 10.0.0.4 not telling")
    assert str(waits.value).endswith("(0 s)")


def test_state_is_served_and_the_liveness_port_is_held_while_waiting(script):
    import socket
    import urllib.request

    from tests.conftest import free_port
    from undercloud.agent import probes

    state, dist = free_port(), free_port()
    servers = [script.serve(state, "10.0.0.3"), script.serve(dist, "10.0.0.3")]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{state}/state", timeout=5) as r:
            assert json.load(r) == {"data": False, "written": 0.0, "phase": "waiting"}
        assert probes.probe({"tcpSocket": {"port": dist}}, timeout=2) == (True, "")
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
    with pytest.raises(OSError):  # given back before RabbitMQ starts: its port to take
        socket.create_connection(("127.0.0.1", dist), timeout=2)


@pytest.fixture
def schema(script, tmp_path, monkeypatch):
    """This RabbitMQ's configuration schema: RabbitMQ 3's (Zed's) by default."""
    path = tmp_path / "rabbit.schema"
    path.write_text('{mapping, "cluster_formation.randomized_startup_delay_range.min", "rabbit.x", []}.\n')
    monkeypatch.setattr(script, "SCHEMAS", str(tmp_path / "*.schema"))
    return path


def test_configuration_names_the_node_and_lists_every_peer(script, schema):
    Path(script.CONF).write_text("listeners.tcp.default = 5672\n")
    script.configure("rabbit@10.0.0.3", NODES)
    assert Path(script.ENV_CONF).read_text() == "NODENAME=rabbit@10.0.0.3\nUSE_LONGNAME=true\n" + script.ERL_ARGS
    conf = dict(line.split(" = ", 1) for line in Path(script.CONF).read_text().splitlines() if " = " in line)
    assert conf["listeners.tcp.default"] == "5672"  # what the template gave is kept
    assert conf["cluster_formation.peer_discovery_backend"] == "classic_config"
    assert [conf[f"cluster_formation.classic_config.nodes.{i}"] for i in (1, 2, 3)] == [
        "rabbit@10.0.0.2", "rabbit@10.0.0.3", "rabbit@10.0.0.4"]
    assert conf["cluster_partition_handling"] == "pause_minority"
    assert conf["cluster_formation.randomized_startup_delay_range.max"] == "1"


def test_the_node_forming_the_cluster_lists_only_itself(script, schema):
    """RabbitMQ 4 boots a node without data as a cluster's seed only once two of the nodes
    its classic_config lists answer (else it retries for minutes): the first node of a first
    deploy, which the others wait for, lists itself alone; a joining node lists every node."""
    Path(script.CONF).write_text("listeners.tcp.default = 5672\n")
    script.configure("rabbit@10.0.0.2", NODES, forming=True)
    conf = dict(line.split(" = ", 1) for line in Path(script.CONF).read_text().splitlines() if " = " in line)
    assert [v for k, v in conf.items() if k.startswith("cluster_formation.classic_config.nodes.")] == [
        "rabbit@10.0.0.2"]
    assert conf["cluster_partition_handling"] == "pause_minority"
    assert "USE_LONGNAME=true" in Path(script.ENV_CONF).read_text()


def test_a_setting_this_rabbitmq_does_not_know_is_left_out(script, schema):
    """RabbitMQ 4 (2025.1's) dropped the randomized startup delay and refuses to start on its
    keys (failed_to_prepare_configuration)."""
    schema.write_text('{mapping, "cluster_partition_handling", "rabbit.cluster_partition_handling", []}.\n')
    Path(script.CONF).write_text("listeners.tcp.default = 5672\n")
    script.configure("rabbit@10.0.0.3", NODES)
    conf = dict(line.split(" = ", 1) for line in Path(script.CONF).read_text().splitlines() if " = " in line)
    assert conf["cluster_partition_handling"] == "pause_minority"
    assert not [k for k in conf if "randomized_startup_delay" in k]
    assert script.knows("cluster_partition_handling") and not script.knows("cluster_formation.randomized")


def test_one_broker_is_rabbit_at_localhost_without_cluster_settings(script):
    Path(script.CONF).write_text("listeners.tcp.default = 5672\n")
    script.configure("rabbit@localhost", ["10.0.0.2"])
    assert Path(script.ENV_CONF).read_text() == "NODENAME=rabbit@localhost\n" + script.ERL_ARGS
    assert Path(script.CONF).read_text() == "listeners.tcp.default = 5672\n"
    # neither the broker's schedulers nor those of the CLI tools' VMs spin waiting for work
    env = dict(line.split("=", 1) for line in Path(script.ENV_CONF).read_text().splitlines())
    assert env["SERVER_ADDITIONAL_ERL_ARGS"] == env["CTL_ERL_ARGS"] == '"+sbwt none +sbwtdcpu none +sbwtdio none"'


def test_the_template_gives_every_node_the_cluster_the_cookie_and_a_data_claim():
    from tests.unit import service_support

    given = {"ServiceNodes": {"rabbitmq": NODES}, "RabbitPassword": "rp", "RabbitCookie": "cookie-secret"}
    files, pod, rd = service_support.render("rabbitmq", given, "localhost/undercloud/service-rabbitmq:1")
    assert rd["secrets"] == {"RabbitPassword": "password", "RabbitCookie": "password"}
    assert json.loads(files["cluster.json"]) == {"nodes": NODES}
    assert files["erlang.cookie"] == "cookie-secret"
    start = json.loads(files["config.json"])
    assert start["command"] == ["/usr/local/bin/uc-rabbitmq-start"]
    cookie = [f for f in start["config_files"] if f["dest"] == "/var/lib/rabbitmq/.erlang.cookie"]
    assert cookie == [{"source": "/var/lib/undercloud/config/erlang.cookie", "dest": "/var/lib/rabbitmq/.erlang.cookie",
                       "owner": "rabbitmq:rabbitmq", "perm": "0400"}]  # Erlang refuses a cookie others can read
    container = pod["spec"]["containers"][0]
    assert "env" not in container  # the node's name comes from uc-rabbitmq-start, for rabbitmqctl too
    assert container["readinessProbe"] == {"tcpSocket": {"port": 5672}}
    assert container["livenessProbe"] == {"tcpSocket": {"port": 25672}}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert {mounts[n]: c for n, c in claims.items()} == {"/var/lib/rabbitmq/mnesia": "rabbitmq-data"}


def test_the_cluster_is_asked_to_grow_only_once_a_peer_answers(script, monkeypatch):
    calls = []

    def ctl(*args, tool="rabbitmqctl", timeout=120):
        calls.append((tool, args[0]))
        if args[0] == "cluster_status":
            return 0, json.dumps({"running_nodes": ["rabbit@10.0.0.2", "rabbit@10.0.0.3"]})
        return 0, ""

    def sleep(_s):
        raise Waits("sleeps")

    monkeypatch.setattr(script, "ctl", ctl)
    monkeypatch.setattr(script.time, "sleep", sleep)
    # the first node of a deploy answers long before its peers: no rabbitmqctl (an Erlang
    # VM of its own, 2-3 s of CPU) while it is alone
    script.answers = lambda address: address == "10.0.0.2"
    with pytest.raises(Waits):
        script.grow_when_up("10.0.0.2", ["10.0.0.3", "10.0.0.4"])
    assert calls == []
    script.answers = lambda address: address in ("10.0.0.2", "10.0.0.3")
    script.grow_when_up("10.0.0.2", ["10.0.0.3", "10.0.0.4"])
    assert calls == [("rabbitmqctl", "cluster_status"), ("rabbitmq-queues", "grow")]


def test_as_pid_1_it_runs_itself_under_dumb_init(script, monkeypatch):
    ran = []
    monkeypatch.setattr(script.os, "execvp", lambda prog, argv: ran.append(argv))
    monkeypatch.setattr(script.os, "getpid", lambda: 1)
    script.under_init()
    assert ran == [["dumb-init", "--single-child", "--", script.sys.executable, str(SCRIPT)]]
    monkeypatch.setattr(script.os, "getpid", lambda: 7)  # under dumb-init: its child runs on
    script.under_init()
    assert len(ran) == 1


def data_of(script, name):
    (Path(script.MNESIA) / name).mkdir(parents=True)
    (Path(script.MNESIA) / name / "schema.DAT").write_text("x")


def test_a_move_between_one_broker_and_a_cluster_is_seen_from_the_former_names_data(script):
    assert script.former_data("rabbit@10.0.0.2") is None  # a first deploy: nothing to migrate
    (Path(script.MNESIA) / "rabbit@localhost-plugins-expand").mkdir(parents=True)
    (Path(script.MNESIA) / "rabbit@localhost").mkdir()  # an empty directory holds no queues
    assert script.former_data("rabbit@10.0.0.2") is None
    data_of(script, "rabbit@10.0.0.2")
    assert script.former_data("rabbit@10.0.0.2") is None  # its own data: the same cluster
    data_of(script, "rabbit@localhost-x")
    assert script.former_data("rabbit@10.0.0.2") is None
    (Path(script.MNESIA) / "rabbit@localhost" / "schema.DAT").write_text("x")
    # one broker before, a cluster's node now; and back: the cluster's node name is the former
    assert script.former_data("rabbit@10.0.0.2") == str(Path(script.MNESIA) / "rabbit@localhost")
    assert script.former_data("rabbit@localhost") == str(Path(script.MNESIA) / "rabbit@10.0.0.2")


QUEUES = [{"name": "conductor", "type": "classic", "vhost": "/"},
          {"name": "conductor.ctl0", "type": "quorum", "vhost": "/"},
          {"name": "conductor_fanout_4f1c", "type": "classic", "vhost": "/"},
          {"name": "reply_9a2e", "type": "classic", "vhost": "/"},
          {"name": "scheduler", "type": "quorum", "vhost": "/"}]


def test_the_queues_of_the_former_type_are_those_the_services_now_declare_otherwise(script):
    # a cluster: topic queues are quorum; classic fanout and reply queues are as oslo declares them
    assert script.stale_queues(QUEUES, cluster=True) == [("/", "conductor")]
    # one broker: no quorum queue at all
    assert script.stale_queues(QUEUES, cluster=False) == [("/", "conductor.ctl0"), ("/", "scheduler")]
    assert script.stale_queues([], cluster=True) == []


def test_a_migration_deletes_as_they_come_then_ends_and_removes_the_former_data(script, monkeypatch):
    data_of(script, "rabbit@localhost")
    listed = [[{"name": "conductor", "type": "classic", "vhost": "/"}], [], [],
              [{"name": "compute", "type": "classic", "vhost": "/"}]] + [[]] * script.MIGRATE_QUIET
    calls = []

    def ctl(*args, tool="rabbitmqctl", timeout=120):
        calls.append(args[0] if args[0] == "list_queues" else args)
        if args[0] == "list_queues":
            return 0, json.dumps(listed.pop(0))
        return 0, ""

    monkeypatch.setattr(script, "ctl", ctl)
    monkeypatch.setattr(script.time, "sleep", lambda _s: None)
    script.answers = lambda address: True
    script.migrate_queues("10.0.0.2", str(Path(script.MNESIA) / "rabbit@localhost"), cluster=True)
    assert [c for c in calls if c != "list_queues"] == [("delete_queue", "-p", "/", "conductor"),
                                                        ("delete_queue", "-p", "/", "compute")]
    assert calls.count("list_queues") == 4 + script.MIGRATE_QUIET  # quiet rounds count from the last stale one
    assert listed == []
    assert not (Path(script.MNESIA) / "rabbit@localhost").exists()
    assert script.logged[-1].startswith(f"no queue of the former type for {script.MIGRATE_QUIET} minutes")


def test_a_migration_that_never_ends_stops_asking_and_keeps_the_former_data(script, monkeypatch):
    data_of(script, "rabbit@10.0.0.2")
    calls = []

    def ctl(*args, tool="rabbitmqctl", timeout=120):
        calls.append(args)
        if args[0] == "list_queues":
            assert args[1:3] == ("-p", "/")  # the services' vhost; list_queues has no vhost column
            return 0, json.dumps([{"name": "conductor", "type": "quorum"}])
        return 0, ""

    monkeypatch.setattr(script, "ctl", ctl)
    monkeypatch.setattr(script.time, "sleep", lambda _s: None)
    script.answers = lambda address: True
    script.migrate_queues("localhost", str(Path(script.MNESIA) / "rabbit@10.0.0.2"), cluster=False)
    assert len([c for c in calls if c[0] == "list_queues"]) == script.MIGRATE_ROUNDS
    assert ("delete_queue", "-p", "/", "conductor") in calls
    assert (Path(script.MNESIA) / "rabbit@10.0.0.2").exists()  # the next start tries again
    assert script.logged[-1].startswith(f"queues of the former type still came after {script.MIGRATE_ROUNDS}")


def test_once_started_the_node_tells_when_it_wrote_before_this_start(script):
    # RabbitMQ writes its files again as it boots: a holder started first must not look like
    # the one that stopped last
    data_of(script, "rabbit@10.0.0.3")
    os.utime(Path(script.MNESIA) / "rabbit@10.0.0.3" / "schema.DAT", (1000.0, 1000.0))
    script.PHASE["written"] = script.own_state("10.0.0.3")["written"]
    script.PHASE["now"] = "started"
    (Path(script.MNESIA) / "rabbit@10.0.0.3" / "LATEST.LOG").write_text("booting")
    assert script.own_state("10.0.0.3") == {"data": True, "written": 1000.0, "phase": "started"}
