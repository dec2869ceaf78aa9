"""Nodes at scale: enrol N fake nodes, take them all to available, schedule M servers
concurrently, and time one power-sync pass. Prints figures; never pass/fail.

    python3 bench/nodes_bench.py [--nodes 10000] [--requests 1000] [--threads 32] [--db sqlite|postgresql|URL]

Goal (issue 4): 10,000 nodes on one undercloud process with a power-sync pass under 5 s
(Ironic guides 300 nodes per conductor). Uses the real service code and SQLite store
in-process; only the BMCs are fake. The verbs come from --threads client threads at once
(as API requests would), each request naming 64 nodes as one `undercloud node manage ...`
does (issue 42: they share transactions; `--per-node`: one request per node, as before),
and the work runs on the nodes service's own pool, sized from the store (issue 17: busy is
never a failure): every node must reach the state, none may fail.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_store  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from undercloud.errors import Conflict  # noqa: E402
from undercloud.provisioning import states  # noqa: E402
from undercloud.provisioning.drivers import fake  # noqa: E402
from undercloud.provisioning.nodes import NodeService  # noqa: E402
from undercloud.provisioning.scheduler import Request, Scheduler  # noqa: E402
from undercloud.store import Store  # noqa: E402
from undercloud.store.nodes import Node  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def count(store: Store, state: str) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(Node).where(Node.provision_state == state))


def failed(store: Store) -> int:
    """Nodes in a failed state, or sent back with an error (a failed verify returns to enroll)."""
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(Node).where(
            Node.provision_state.in_(states.FAILED) | Node.last_error.is_not(None)))


CHUNK = 64  # nodes per request (one `undercloud node manage n1 n2 ...` is one request)


def drive(svc: NodeService, ids: list[str], verb: str, want: str, threads: int, per_node: bool = False) -> float:
    t0 = time.perf_counter()
    chunks = [ids[k:k + CHUNK] for k in range(0, len(ids), CHUNK)]
    with ThreadPoolExecutor(threads) as pool:  # as many `undercloud node VERB` commands at once
        if per_node:
            list(pool.map(lambda i: svc.act(i, verb), ids, chunksize=CHUNK))
        else:
            list(pool.map(lambda chunk: svc.act_many(chunk, verb), chunks))
    deadline = time.monotonic() + 1800
    while count(svc.store, want) < len(ids):
        bad = failed(svc.store)
        if bad or time.monotonic() > deadline:
            raise SystemExit(f"{verb}: {count(svc.store, want)} of {len(ids)} nodes reached {want}, {bad} failed")
        time.sleep(0.05)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--db", default="sqlite", help=bench_store.HELP)
    ap.add_argument("--per-node", action="store_true", help="one request per node (not 64 per request)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nodes-bench-"))
    with bench_store.store_url(args.db, tmp) as url:
        run(args, Store(url, tmp / "store.key").create_schema())


def run(args, store: Store) -> None:
    n, m = args.nodes, args.requests
    svc = NodeService(store)
    rows = []

    def row(what: str, seconds: float, per: int | None = None) -> None:
        per_txt = f"{seconds / per * 1e3:8.3f} ms/node" if per else ""
        rows.append((what, seconds, per_txt))
        print(f"{what:<44} {seconds:8.2f} s  {per_txt}   peak {peak_mb():6.0f} MB", flush=True)

    print(f"nodes={n} requests={m} threads={args.threads} store={store.display_url} "
          f"{'one request per node' if args.per_node else f'{CHUNK} nodes per request'} "
          f"(connections {store.capacity}, node workers {svc.workers})")
    inventory = {"nodes": [
        {"name": f"bench-{i:05d}", "pm_type": "fake", "pm_addr": f"bench-{i}", "pm_user": "admin",
         "pm_password": "secret", "ports": [{"address": f"52:54:{i >> 24 & 255:02x}:{i >> 16 & 255:02x}:"
                                                        f"{i >> 8 & 255:02x}:{i & 255:02x}"}],
         "cpu": 4, "memory": 8192 if i % 3 else 16384, "disk": 100,
         "capabilities": "profile:control" if i % 10 == 0 else "profile:compute"}
        for i in range(n)]}
    text = json.dumps(inventory)
    t0 = time.perf_counter()
    svc.import_nodes(text, "bench.json")
    row("enrol (one instackenv import)", time.perf_counter() - t0, n)

    with store.session() as s:
        ids = list(s.scalars(select(Node.id)))
    per = args.per_node
    row("manage (enroll -> manageable)", drive(svc, ids, "manage", states.MANAGEABLE, args.threads, per), n)
    row("provide (manageable -> available)", drive(svc, ids, "provide", states.AVAILABLE, args.threads, per), n)

    sched = Scheduler(store)

    def claim(i: int):
        req = Request(instance_uuid=f"server-{i}", profile="control" if i % 10 == 0 else "compute",
                      memory_mb=4096)
        try:
            return sched.claim(req)["uuid"]
        except Conflict:
            return None

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool:
        got = list(pool.map(claim, range(m)))
    took = time.perf_counter() - t0
    won = [g for g in got if g]
    row(f"schedule {m} servers ({args.threads} threads)", took)
    print(f"  claimed {len(won)} nodes, {len(set(won))} distinct, {m - len(won)} refused; "
          f"{m / took:.0f} claims/s, {took / m * 1e3:.2f} ms/claim")

    # Power sync: first pass reads every BMC (the fake ones answer at once); then some drift.
    svc.sync_power()
    for i in range(0, n, 100):
        fake.machine_state(f"bench-{i}")["power"] = "on"
    stats = svc.sync_power()
    row("power-sync pass", stats["seconds"], stats["nodes"])
    print(f"  {stats['nodes']} nodes read, {stats['drift']} drifted (recorded), {stats['failed']} unreadable; "
          f"goal < 5 s: {'met' if stats['seconds'] < 5 else 'NOT met'}")
    delay = 0.002
    with store.session() as s:
        for node in s.scalars(select(Node)):
            node.driver_info = {**node.driver_info, "delay": {"power": delay}}
    stats = svc.sync_power()
    row(f"power-sync pass, BMCs answering in {delay * 1e3:.0f} ms", stats["seconds"], stats["nodes"])
    print(f"  ({len(svc.sync_pool._threads)} BMC reads in parallel)")
    svc.close()
    print(f"nodes failed: {failed(store)}")
    print(f"peak memory (RSS) {peak_mb():.0f} MB for {n} nodes: {peak_mb() * 1024 / n:.1f} KB/node")


if __name__ == "__main__":
    main()
