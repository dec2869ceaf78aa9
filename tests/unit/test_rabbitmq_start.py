"""uc-rabbitmq-start: how a RabbitMQ node starts, alone or in the overcloud's cluster: with
its own data it rejoins; without, it joins a running peer (after asking it to forget a former
node of its name: a replaced node) or, the first node with no peer running, forms the cluster;
the others wait for a peer, so that one cluster forms, not three. The ha e2e runs the same
script for real (and it was tried by hand: three nodes, a replaced one, all killed)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
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


def decide(script, me, running=(), data=False):
    script.answers = lambda address: address in running
    if data:
        (Path(script.MNESIA) / f"rabbit@{me}").mkdir(parents=True)
        (Path(script.MNESIA) / f"rabbit@{me}" / "schema.DAT").write_text("x")
    try:
        return script.decide(NODES, me)
    except Waits as waits:
        return str(waits)


def test_a_first_deploy_forms_one_cluster_on_the_first_node(script):
    assert decide(script, "10.0.0.2") == ("form", None)
    assert decide(script, "10.0.0.3").startswith("no data here and no peer running yet (10.0.0.2, 10.0.0.4)")
    assert decide(script, "10.0.0.4", running=["10.0.0.2"]) == ("join", "10.0.0.2")


def test_an_empty_node_joins_a_running_peer_even_when_it_is_the_first(script):
    # the first node replaced while the others run: it joins them, never forms a second cluster
    assert decide(script, "10.0.0.2", running=["10.0.0.4"]) == ("join", "10.0.0.4")
    assert decide(script, "10.0.0.3", running=["10.0.0.2", "10.0.0.4"]) == ("join", "10.0.0.2")


def test_a_node_with_its_data_rejoins_without_waiting(script):
    # after a whole-cluster stop every node has data: all start, and RabbitMQ finds its peers
    assert decide(script, "10.0.0.3", data=True) == ("rejoin", None)
    # an empty directory of another node name (rabbit@localhost, before it was a cluster) is not its data
    (Path(script.MNESIA) / "rabbit@localhost").mkdir(parents=True)
    assert decide(script, "10.0.0.4") == "no data here and no peer running yet (10.0.0.2, 10.0.0.3): waiting for one (0 s)"


def test_configuration_names_the_node_and_lists_every_peer(script):
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
