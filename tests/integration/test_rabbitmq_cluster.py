"""RabbitMQ's cluster for real: three containers of the built service-rabbitmq image, each
with its own address on a podman network, configured from the service's template
(services/rabbitmq.yaml) and started by uc-rabbitmq-start as the kube hook starts them.

- a first deploy forms one cluster of three;
- every controller down, the first replaced (a new container with no data) and started
  before the others: it waits, says so, keeps its liveness check passing, forms nothing;
  once the others are back there is one cluster, the old one, holding what was made in it
  (the first stopped last, so the others' Mnesia would wait for it forever: the one of
  them that wrote last starts without waiting).

Needs root and podman (skips otherwise). The image comes from the image builder (cached
by content). Everything made here (containers, volumes, network) is removed, even when
a test fails.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.conftest import need, need_root, run_cli
from tests.integration.test_workers import wait_for

LABEL = f"undercloud.test=rabbitmq-{os.getpid()}"
NAMES = ["rmq-a", "rmq-b", "rmq-c"]
LIVENESS_HOST_TIMEOUT = 5.0
# as the agent runs containers (agent/engine.py): runc and explicit ulimits
RUN = ["--runtime", "runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]


def podman(*args: str, timeout: float = 300):
    import subprocess
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


class Cluster:
    """Three broker containers on one podman network, as three controllers."""

    def __init__(self, image: str, base, tmp_path):
        self.image, self.tmp = image, tmp_path
        self.net = f"rmq-test-{os.getpid()}"
        self.nodes = [f"{base}.{i}" for i in (11, 12, 13)]
        from tests.unit import service_support

        given = {"ServiceNodes": {"rabbitmq": self.nodes}, "RabbitPassword": "rp", "RabbitCookie": "test-cookie-1234"}
        self.files, pod, _ = service_support.render("rabbitmq", given, image)
        self.container = pod["spec"]["containers"][0]
        config = tmp_path / "config"
        config.mkdir()
        for name, text in self.files.items():
            (config / name).write_text(text)
        self.config = config

    def name(self, i: int) -> str:
        return f"{NAMES[i]}-{os.getpid()}"

    def start(self, i: int) -> None:
        """Its container (made again when it was removed) with its data volume, started."""
        name = self.name(i)
        if podman("container", "exists", name).returncode == 0:
            r = podman("start", name)
        else:
            r = podman("run", "-d", "--name", name, "--label", LABEL, *RUN, "--network", self.net, "--ip", self.nodes[i],
                       "-v", f"{self.config}:/var/lib/undercloud/config:ro",
                       "-v", f"{name}-data:/var/lib/rabbitmq/mnesia",
                       self.image, *self.container["command"])
        assert r.returncode == 0, r.stderr

    def replace(self, i: int) -> None:
        """A new controller in its place: the container and its data are gone."""
        name = self.name(i)
        assert podman("rm", "-f", "-t", "0", name).returncode == 0
        assert podman("volume", "rm", "-f", f"{name}-data").returncode == 0
        assert podman("volume", "create", "--label", LABEL, f"{name}-data").returncode == 0

    def logs(self, i: int) -> str:
        r = podman("logs", self.name(i))
        return r.stdout + r.stderr

    def ctl(self, i: int, *args: str) -> tuple[int, str]:
        r = podman("exec", "-u", "rabbitmq", "-e", "HOME=/var/lib/rabbitmq", self.name(i), "rabbitmqctl", *args)
        return r.returncode, r.stdout + r.stderr

    def running_nodes(self, i: int) -> list[str]:
        code, out = self.ctl(i, "cluster_status", "--formatter", "json")
        if code != 0:
            return []
        try:
            return sorted(json.loads(out[out.index("{"):]).get("running_nodes") or [])
        except ValueError:
            return []

    def answers_amqp(self, i: int) -> bool:
        import socket
        try:
            with socket.create_connection((self.nodes[i], 5672), timeout=2):
                return True
        except OSError:
            return False

    def state(self, i: int) -> dict | None:
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://{self.nodes[i]}:25673/state", timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def one_cluster(self) -> bool:
        """Every node answers on AMQP and each counts all three running (asked only then:
        each rabbitmqctl is an Erlang VM, 2-3 s of CPU)."""
        if not all(self.answers_amqp(i) for i in range(3)):
            return False
        want = sorted(f"rabbit@{n}" for n in self.nodes)
        return all(self.running_nodes(i) == want for i in range(3))

    def wait(self, what: str, ok, timeout: float = 420, every: float = 3):
        try:
            return wait_for(what, ok, timeout, every)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + "\n".join(f"--- {self.name(i)}:\n{self.logs(i)[-3000:]}"
                                                         for i in range(3))) from None


@pytest.fixture
def cluster(uc_home, tmp_path):
    need("podman")
    need_root()
    r = run_cli("image", "build", "service-rabbitmq", timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli("image", "show", "service-rabbitmq", "-f", "json")
    assert r.returncode == 0, r.stderr
    image = json.loads(r.stdout)["properties"]["podman_image"]
    net = f"rmq-test-{os.getpid()}"
    base = None
    for third in range(130, 250):  # a /24 no other network of this host holds
        made = podman("network", "create", "--label", LABEL, "--subnet", f"10.231.{third}.0/24", net)
        if made.returncode == 0:
            base = f"10.231.{third}"
            break
    if base is None:
        pytest.skip(f"no free subnet for a podman network: {made.stderr.strip()}")
    c = Cluster(image, base, tmp_path)
    for i in range(3):
        assert podman("volume", "create", "--label", LABEL, f"{c.name(i)}-data").returncode == 0
    try:
        yield c
    finally:
        for i in range(3):
            podman("rm", "-f", "-t", "0", c.name(i))
        for v in podman("volume", "ls", "-q", "--filter", f"label={LABEL}").stdout.split():
            podman("volume", "rm", "-f", v)
        podman("network", "rm", "-f", net)
        assert podman("ps", "-a", "-q", "--filter", f"label={LABEL}").stdout.split() == []


def test_first_deploy_forms_one_cluster_then_a_replaced_first_node_waits_for_the_old_one(cluster):
    from undercloud.agent import probes

    for i in range(3):
        cluster.start(i)
    cluster.wait("one cluster of three after a first deploy", cluster.one_cluster)
    assert "every peer says it holds no data: forming the cluster" in cluster.logs(0)
    assert "joining rabbit@" in cluster.logs(1) and "joining rabbit@" in cluster.logs(2)
    # something the cluster holds, to tell it from a new one
    assert cluster.ctl(1, "add_vhost", "made-in-the-old-cluster")[0] == 0
    assert cluster.state(0)["data"] is True and cluster.state(0)["phase"] == "started"

    # every controller down (the first last: the hardest case, the others' Mnesia waits
    # for the node that stopped last), then the first replaced by a node with no data
    for i in (1, 2, 0):
        assert podman("stop", "-t", "60", cluster.name(i)).returncode == 0
    cluster.replace(0)
    cluster.start(0)

    # alone: peers silent, it waits and says so; its liveness check (the Pod's, as the
    # agent's watchdog runs it) passes while it waits; it opens no AMQP (forms nothing)
    cluster.wait("the new first node tells its state", lambda: cluster.state(0))
    assert cluster.state(0) == {"data": False, "written": 0.0, "phase": "waiting"}
    liveness = dict(cluster.container["livenessProbe"])
    liveness["tcpSocket"] = {**liveness["tcpSocket"], "host": cluster.nodes[0]}
    for _ in range(3):
        assert probes.probe(liveness, timeout=LIVENESS_HOST_TIMEOUT) == (True, "")
        time.sleep(2)
    cluster.wait("it says it waits", lambda: "not telling whether they hold data yet: waiting" in cluster.logs(0), 60)
    assert not cluster.answers_amqp(0)
    assert "forming the cluster" not in cluster.logs(0)

    # the others come back with their data: the one that wrote last starts without waiting
    # for the former first node (their Mnesia would wait for it: it stopped last), the
    # other rejoins it, and the new first node joins their cluster
    cluster.start(1)
    cluster.start(2)
    cluster.wait("one cluster of three again", cluster.one_cluster)
    assert "the cluster's data is on" in cluster.logs(0)
    assert "without data: joining rabbit@" in cluster.logs(0).split("waiting")[-1]
    assert "the latest; a peer has none (replaced): starting without waiting" in cluster.logs(2)
    assert "with its data: rejoining its cluster" in cluster.logs(1)
    code, out = cluster.ctl(0, "list_vhosts", "--formatter", "json")
    assert code == 0 and "made-in-the-old-cluster" in out  # the old cluster, not a new one
    assert podman("inspect", cluster.name(0), "--format", "{{.RestartCount}}").stdout.strip() in ("0", "")


def test_one_broker_after_a_cluster_deletes_the_quorum_queues_the_services_declare(cluster):
    """3 -> 1: the volume of the broker left holds its former name's data (rabbit@<address>).
    The services not yet restarted declare quorum queues in the new lone broker; it deletes
    them (and only them), so that each restarted service declares its classic one."""
    from tests.unit import service_support

    given = {"ServiceNodes": {"rabbitmq": cluster.nodes[:1]}, "RabbitPassword": "rp", "RabbitCookie": "test-cookie-1234"}
    files, _, _ = service_support.render("rabbitmq", given, cluster.image)
    for name, text in files.items():
        (cluster.config / name).write_text(text)
    name = cluster.name(0)
    former = f"rabbit@{cluster.nodes[0]}"
    r = podman("run", "--rm", *RUN, "-v", f"{name}-data:/m", "--entrypoint", "sh", cluster.image, "-c",
               f"mkdir -p /m/{former} && echo x > /m/{former}/schema.DAT")
    assert r.returncode == 0, r.stderr
    cluster.start(0)
    cluster.wait("the lone broker answers", lambda: cluster.answers_amqp(0), 300)
    declare = ('rabbit_amqqueue:declare(rabbit_misc:r(<<"/">>, queue, <<"{q}">>), {durable}, false, {args}, none, '
               '<<"test">>).')
    assert cluster.ctl(0, "eval", declare.format(q="conductor", durable="true",
                                                 args='[{<<"x-queue-type">>, longstr, <<"quorum">>}]'))[0] == 0
    assert cluster.ctl(0, "eval", declare.format(q="reply_1f", durable="false", args="[]"))[0] == 0
    assert "one broker now, a cluster's node before" in cluster.logs(0)

    def listed():
        code, out = cluster.ctl(0, "list_queues", "-p", "/", "name", "type", "--formatter", "json", "--quiet")
        return sorted((q["name"], q["type"]) for q in json.loads(out)) if code == 0 else None

    cluster.wait("the quorum queue deleted", lambda: listed() == [("reply_1f", "classic")], 300, every=20)
    assert "queue conductor (/) was of the former type (quorum): deleted" in cluster.logs(0)
