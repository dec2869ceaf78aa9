"""uc-mariadb-start's decision at a Galera node's start: join, bootstrap, or wait (and say for
what). Every case a real cluster meets: a first deploy, a node back while the others run,
an empty (replaced) node, every node killed, every node stopped cleanly, quorum lost.
Peers are what their :9200/state would answer; the deploy e2e runs the same script for real."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

import undercloud

SCRIPT = Path(undercloud.__file__).parent / "images" / "elements" / "mariadb" / "static" / "usr" / "local" / "bin" \
    / "uc-mariadb-start"
NODES = ["10.0.0.2", "10.0.0.3", "10.0.0.4"]


class Waits(Exception):
    pass


def stopped(seqno=None, grastate=True, gvwstate=False, safe=False):
    return {"grastate": grastate, "gvwstate": gvwstate, "safe": safe, "seqno": seqno, "running": False,
            "primary": False, "size": 0, "committed": -1}


def running(primary, committed, size=3):
    return {"grastate": True, "gvwstate": True, "safe": False, "seqno": None, "running": True,
            "primary": primary, "size": size, "committed": committed}


@pytest.fixture
def start(tmp_path, monkeypatch):
    """decide() of a fresh copy of the script for node `me`, with `peers` answering as given
    (None: not answering) and this node's data directory holding `files`; returns "join",
    "new", or the line it logged while it waits."""
    def run(me: str, peers: dict, files: dict | None = None, seqno: int = -1):
        loader = importlib.machinery.SourceFileLoader("uc_mariadb_start", str(SCRIPT))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(module)
        datadir = tmp_path / f"{me}-{len(list(tmp_path.iterdir()))}"  # a data directory per call
        datadir.mkdir()
        for name, text in (files or {}).items():
            (datadir / name).write_text(text)
        logged = []
        monkeypatch.setattr(module, "DATADIR", str(datadir))
        monkeypatch.setattr(module, "peer_state", lambda p: peers[p])
        monkeypatch.setattr(module, "recovered_seqno", lambda _args: seqno)
        monkeypatch.setattr(module, "log", logged.append)

        def sleep(_s):
            raise Waits(logged[-1])

        monkeypatch.setattr(module.time, "sleep", sleep)
        try:
            return module.decide(NODES, me, [])
        except Waits as waits:
            return str(waits)
    return run


def grastate(seqno: int, safe: int = 0) -> str:
    return f"# GALERA saved state\nversion: 2.1\nuuid: 6f0e-1\nseqno: {seqno}\nsafe_to_bootstrap: {safe}\n"


def test_a_first_deploy_bootstraps_on_the_first_node_only_when_every_node_is_empty(start):
    fresh = stopped(grastate=False)
    assert start(NODES[0], {NODES[1]: fresh, NODES[2]: fresh}) == "new"
    assert start(NODES[1], {NODES[0]: fresh, NODES[2]: fresh}) == f"a first deploy: waiting for {NODES[0]} to bootstrap"
    # One node not answering yet: the first waits too (it may hold the data).
    assert "waiting for the other nodes (10.0.0.4)" in start(NODES[0], {NODES[1]: fresh, NODES[2]: None})


def test_any_node_in_a_primary_component_is_joined(start):
    assert start(NODES[0], {NODES[1]: running(True, 40), NODES[2]: None}) == "join"
    # Even by a node whose own state says it could bootstrap.
    assert start(NODES[2], {NODES[0]: running(True, 40), NODES[1]: None}, {"grastate.dat": grastate(50, 1)}) == "join"


def test_an_empty_node_never_bootstraps_while_another_holds_data(start):
    # A replaced first node (empty volume) while the other two are down with the data.
    got = start(NODES[0], {NODES[1]: stopped(30), NODES[2]: stopped(31)})
    assert got == "an empty node: another node holds the data; waiting for it to start"


def test_every_node_stopped_cleanly_the_latest_commit_bootstraps_ties_to_the_first(start):
    peers_of = {NODES[0]: (24, {NODES[1]: stopped(25), NODES[2]: stopped(25)}),
                NODES[1]: (25, {NODES[0]: stopped(24), NODES[2]: stopped(25)}),
                NODES[2]: (25, {NODES[0]: stopped(24), NODES[1]: stopped(25)})}
    got = {me: start(me, peers, {"grastate.dat": grastate(seqno)}, seqno) for me, (seqno, peers) in peers_of.items()}
    assert got == {NODES[0]: f"no primary cluster: {NODES[1]} has the latest commit and bootstraps",
                   NODES[1]: "new",
                   NODES[2]: f"no primary cluster: {NODES[1]} has the latest commit and bootstraps"}


def test_a_node_that_left_last_cleanly_bootstraps_and_the_others_wait_for_it(start):
    assert start(NODES[1], {NODES[0]: stopped(20), NODES[2]: None}, {"grastate.dat": grastate(25, 1)}) == "new"
    got = start(NODES[0], {NODES[1]: stopped(25, safe=True), NODES[2]: stopped(24)}, {"grastate.dat": grastate(20)}, 20)
    assert got == "waiting for the node that is safe to bootstrap"


def test_killed_together_they_join_and_restore_their_last_primary_component(start):
    killed = stopped(-1, gvwstate=True)
    files = {"grastate.dat": grastate(-1), "gvwstate.dat": "my_uuid: x\n"}
    assert start(NODES[0], {NODES[1]: killed, NODES[2]: killed}, files) == "join"
    # One of them stopped cleanly meanwhile (its view gone): an election instead.
    got = start(NODES[0], {NODES[1]: killed, NODES[2]: stopped(40)}, files, seqno=38)
    assert got == f"no primary cluster: {NODES[2]} has the latest commit and bootstraps"


def test_without_every_node_nobody_bootstraps(start):
    # Two nodes back after a loss of all three, the third still gone: they wait (the third
    # may hold later commits), saying which one they wait for.
    got = start(NODES[0], {NODES[1]: stopped(30), NODES[2]: None}, {"grastate.dat": grastate(31)}, 31)
    assert got == "no primary cluster: waiting for every node to tell its state (not yet: 10.0.0.4)"


def test_a_survivor_without_quorum_counts_with_its_last_commit(start):
    # Two nodes killed; the third runs on without quorum (non-Primary) with later commits
    # than theirs: it is the one to bootstrap from, so they do not.
    files = {"grastate.dat": grastate(-1)}
    got = start(NODES[0], {NODES[1]: stopped(33), NODES[2]: running(False, 35, size=1)}, files, seqno=33)
    assert got == "join"  # connected to it, all three in one component: it makes it primary
    # This node's commit is the latest: it bootstraps, the survivor merges into it.
    got = start(NODES[0], {NODES[1]: stopped(33), NODES[2]: running(False, 35, size=1)}, files, seqno=36)
    assert got == "new"
    # Not yet told by a stopped node: wait for it.
    got = start(NODES[0], {NODES[1]: stopped(None), NODES[2]: running(False, 35, size=1)}, files, seqno=33)
    assert got == "no primary cluster: waiting for every node to tell its last commit"


FAKE_CLIENT = """#!/usr/bin/env python3
# A stand-in for `mariadb -N -B` reading statements from stdin: `SELECT 'x'` answers x,
# `SELECT rows` two rows, `SLOW` never answers, anything else is an error (batch mode exits).
import os, sys
with open(os.environ["FAKE_SPAWNS"], "a") as f:
    f.write("spawn\\n")
for line in sys.stdin:
    stmt = line.strip().rstrip(";")
    if stmt.startswith("SELECT '"):
        print(stmt[8:-1], flush=True)
    elif stmt == "SELECT rows":
        print("a\\t1\\nb\\t2", flush=True)
    elif stmt == "SET x":
        pass
    elif stmt == "SLOW":
        sys.stdin.readline()
    else:
        sys.exit(1)
"""


@pytest.fixture
def client(tmp_path, monkeypatch):
    """The script's sql() over a fake client; returns (sql, spawns: how many clients ran, the
    script's shared Client)."""
    fake = tmp_path / "mariadb"
    fake.write_text(FAKE_CLIENT)
    fake.chmod(0o755)
    spawns = tmp_path / "spawns"
    spawns.write_text("")
    monkeypatch.setenv("FAKE_SPAWNS", str(spawns))
    loader = importlib.machinery.SourceFileLoader("uc_mariadb_start_client", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    monkeypatch.setattr(module.Client, "ARGV", [str(fake)])
    yield module.sql, lambda: len(spawns.read_text().splitlines()), module.CLIENT
    module.CLIENT.close()


def test_checks_share_one_client_and_read_each_answer_whole(client):
    sql, spawns, _ = client
    assert sql("SELECT rows") == "a\t1\nb\t2\n"
    assert sql("SET x") == ""  # a statement without output ends at the marker too
    assert sql("SELECT 'Synced'") == "Synced\n"
    assert spawns() == 1


def test_a_failed_statement_is_none_and_the_next_gets_a_new_client(client):
    sql, spawns, _ = client
    assert sql("SELECT 'up'") == "up\n"
    assert sql("no such statement") is None  # its client exits; a second one fails too
    assert sql("SELECT 'up'") == "up\n"
    assert spawns() == 3  # the first, the retry of the failed statement, the next one


def test_a_client_that_died_meanwhile_is_replaced_without_a_false_answer(client):
    """mariadbd restarted between two checks: the old client is gone, the check still passes."""
    sql, spawns, shared = client
    assert sql("SELECT 'up'") == "up\n"
    shared.proc.kill()
    shared.proc.wait()
    assert sql("SELECT 'up'") == "up\n"
    assert spawns() == 2


def test_no_answer_in_time_is_none_and_the_client_is_dropped(client, monkeypatch):
    sql, spawns, _ = client
    assert sql("SLOW", timeout=0.3) is None
    assert sql("SELECT 'up'") == "up\n"
    assert spawns() == 2
