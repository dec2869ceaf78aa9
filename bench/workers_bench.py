"""Several workers on one store (issue 19). Prints figures; never pass/fail.

    python3 bench/workers_bench.py [--nodes 10000] [--resources 2000] [--db sqlite|postgresql|URL]

1. Power sync of N fake nodes: one pass by 1 worker, then by 3 worker processes at once
   (each syncs the nodes the hash ring gives it); checks every node was read by exactly one.
   Once with BMCs answering at once, once with BMCs answering in 2 ms.
2. Stack creates (30 stacks of 200 chained OS::Heat::Value) sent to 1 worker, then spread
   over 3: the engine's throughput with more workers.
3. Takeover: the service and two `undercloud serve --worker` processes on the store; a stack
   of R resources (layers of OS::Heat::TestResource waiting 1 s each) is created on the first,
   which gets SIGKILL half-way; prints how long until another worker took it over and
   finished it, and checks every resource was created once (one CREATE_COMPLETE event).
   Heartbeats at their default (UNDERCLOUD_HEARTBEAT_INTERVAL, 2 s; dead after 5 missed).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_store  # noqa: E402
from sqlalchemy import select, update  # noqa: E402

from undercloud.store import Store  # noqa: E402

REPO = bench_store.REPO


def sync_worker(url: str, key: str, worker_id: str, out: str) -> None:
    """One worker process's power-sync pass (the fake BMCs live in each process)."""
    from undercloud.provisioning.nodes import NodeService
    from undercloud.store.workers import HashRing, Workers

    store = Store(url, Path(key))
    workers = Workers(store, worker_id)
    svc = NodeService(store)
    svc.worker_id, svc.live_workers = worker_id, workers.live
    svc.sync_power()  # warm: connections, first reads
    stats = svc.sync_power()
    ring = HashRing(workers.live())
    from undercloud.store.nodes import Node

    with store.engine.connect() as conn:
        ids = [i for (i,) in conn.execute(select(Node.id)) if ring.owner(i) == worker_id]
    Path(out).write_text(json.dumps({"stats": stats, "ids": ids}))
    svc.close()


def power_sync(url: str, key: Path, tmp: Path, n: int) -> None:
    from undercloud.provisioning.nodes import NodeService
    from undercloud.store.nodes import Node
    from undercloud.store.workers import Worker, Workers

    store = Store(url, key).create_schema()
    svc = NodeService(store)
    inventory = {"nodes": [{"name": f"bench-{i:05d}", "pm_type": "fake", "pm_addr": f"bench-{i}", "pm_user": "admin",
                            "pm_password": "secret", "cpu": 4, "memory": 8192, "disk": 100} for i in range(n)]}
    t0 = time.perf_counter()
    svc.import_nodes(json.dumps(inventory), "bench.json")
    with store.engine.begin() as conn:
        conn.execute(update(Node).values(provision_state="manageable", power_state="off"))
    print(f"enrolled {n} fake nodes in {time.perf_counter() - t0:.1f} s")
    svc.close()

    def run(ids: list[str]) -> tuple[float, list[dict]]:
        with store.engine.begin() as conn:
            conn.execute(Worker.__table__.delete())
        for w in ids:
            Workers(store, w).join()
        outs = [tmp / f"{w}.json" for w in ids]
        t = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, __file__, "--sync-worker", w, "--url", url, "--key", str(key),
                                   "--out", str(o)]) for w, o in zip(ids, outs)]
        for p in procs:
            if p.wait() != 0:
                raise SystemExit("a sync worker failed")
        return time.perf_counter() - t, [json.loads(o.read_text()) for o in outs]

    for delay in (0.0, 0.002):
        if delay:
            with store.session() as s:
                for node in s.scalars(select(Node)):
                    node.driver_info = {**node.driver_info, "delay": {"power": delay}}
        bmc = f"BMCs answering in {delay * 1e3:.0f} ms" if delay else "BMCs answering at once"
        _, (one,) = run(["w1"])
        print(f"power sync, {bmc}, 1 worker:  {one['stats']['nodes']:6d} nodes in {one['stats']['seconds']:6.2f} s "
              f"(one pass, after a warm one)")
        _, three = run(["w1", "w2", "w3"])
        shares = [r["stats"]["nodes"] for r in three]
        slowest = max(r["stats"]["seconds"] for r in three)
        seen = [i for r in three for i in r["ids"]]
        print(f"power sync, {bmc}, 3 workers: {sum(shares):6d} nodes, shares {shares}, slowest pass "
              f"{slowest:.2f} s ({one['stats']['seconds'] / slowest:.1f}x as fast as one worker; "
              f"processes on {os.cpu_count()} cores)")
        print(f"  every node synced by exactly one worker: "
              f"{len(seen) == len(set(seen)) == n and sum(shares) == n}")


def cli(home: Path, *args: str, check: bool = True) -> str:
    r = subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
                       env={**os.environ, "UNDERCLOUD_HOME": str(home)}, timeout=300)
    if check and r.returncode != 0:
        raise SystemExit(f"undercloud {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def spread(url: str, key: Path, homes: list[Path], tmp: Path, stacks: int = 30, values: int = 200) -> None:
    """Stack creates sent to 1 worker, then spread over 3: wall time until all are complete."""
    from concurrent.futures import ThreadPoolExecutor

    from undercloud.cli.client import Client
    from undercloud.config import Home
    from undercloud.orchestration.template import Bundle
    from undercloud.store.stacks import Stack

    lines = ["heat_template_version: 2018-08-31", "resources:", "  v0: {type: OS::Heat::Value, properties: {value: a}}"]
    lines += [f"  v{i}: {{type: OS::Heat::Value, properties: {{value: {{list_join: ['-', [{{get_attr: [v{i - 1}, "
              f"value]}}, x]]}}}}}}" for i in range(1, values)]
    (tmp / "values.yaml").write_text("\n".join(lines) + "\n")
    bundle = Bundle.from_paths(str(tmp / "values.yaml")).to_json()
    clients = [Client(Home(h)) for h in homes]
    store = Store(url, key)

    def run(n_workers: int, tag: str) -> float:
        t = time.perf_counter()

        def post(i: int) -> None:
            clients[i % n_workers].post("/v1/stacks", json={"name": f"{tag}{i}", "bundle": bundle, "parameters": {}})

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(post, range(stacks)))
        while True:
            with store.engine.connect() as conn:
                busy = conn.execute(select(Stack.id).where(Stack.parent_id.is_(None))
                                    .where(Stack.name.startswith(tag)).where(Stack.status == "IN_PROGRESS")).all()
            if not busy:
                break
            time.sleep(0.05)
        took = time.perf_counter() - t
        with store.engine.connect() as conn:
            owners = {o for (o,) in conn.execute(select(Stack.engine_id).where(Stack.parent_id.is_(None))
                                                 .where(Stack.name.startswith(tag)))}
            failed = conn.execute(select(Stack.id).where(Stack.name.startswith(tag))
                                  .where(Stack.status != "COMPLETE")).all()
        print(f"{stacks} stack creates of {values} Values, sent to {n_workers} worker(s): {took:6.2f} s, "
              f"{stacks * values / took:6.0f} resources/s, run by {len(owners)} worker(s), {len(failed)} failed")
        return took

    one = run(1, "one")
    three = run(3, "three")
    print(f"  3 workers: {one / three:.2f}x as fast as 1 (processes on {os.cpu_count()} cores)")
    for c, tag in ((clients[0], "one"), (clients[1], "three")):
        for i in range(stacks):
            c.delete(f"/v1/stacks/{tag}{i}")


def takeover(url: str, key: Path, tmp: Path, resources: int) -> None:
    from undercloud import daemon
    from undercloud.config import Home
    from undercloud.store.stacks import Stack, StackEvent

    first = tmp / "first"
    os.environ["UNDERCLOUD_STORE_KEY"] = str(key)  # one key for every worker of the store
    env = {**os.environ, "UNDERCLOUD_HOME": str(first), "UNDERCLOUD_DB": url}
    subprocess.run([sys.executable, "-m", "undercloud", "service", "start"], env=env, check=True,
                   capture_output=True)
    procs = []
    for i in (2, 3):
        home = tmp / f"worker{i}"
        log = open(tmp / f"worker{i}.log", "w")  # noqa: SIM115 - closed at the end
        procs.append((subprocess.Popen([sys.executable, "-m", "undercloud", "serve", "--worker", "--db", url],
                                       env={**os.environ, "UNDERCLOUD_HOME": str(home)},
                                       stdout=log, stderr=subprocess.STDOUT), log))
    try:
        deadline = time.monotonic() + 60
        while sum(w["alive"] for w in json.loads(cli(first, "service", "workers", "-f", "json"))) < 3:
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not join within 60 s")
            time.sleep(0.5)
        spread(url, key, [first, tmp / "worker2", tmp / "worker3"], tmp)
        layers = 4
        per = resources // layers
        lines = ["heat_template_version: 2018-08-31", "resources:"]
        for layer in range(layers):
            for i in range(per):
                dep = f", depends_on: [r{layer - 1}_{i}]" if layer else ""
                lines.append(f"  r{layer}_{i}: {{type: OS::Heat::TestResource, properties: {{value: v{i}, "
                             f"action_wait_secs: {{create: 1}}}}{dep}}}")
        (tmp / "big.yaml").write_text("\n".join(lines) + "\n")
        t0 = time.monotonic()
        cli(first, "stack", "create", "big", "-t", str(tmp / "big.yaml"))
        store = Store(url, key)
        while True:
            with store.engine.connect() as conn:
                sid = conn.execute(select(Stack.id).where(Stack.name == "big")).scalar()
                done = conn.execute(select(StackEvent.id).where(StackEvent.root_id == sid)
                                    .where(StackEvent.status == "COMPLETE")).all()
            if len(done) >= resources // 2:
                break
            if time.monotonic() - t0 > 600:
                raise SystemExit("the create did not reach half-way in 600 s")
            time.sleep(0.05)
        os.kill(daemon.pid(Home(first)), signal.SIGKILL)
        killed = time.monotonic()
        print(f"takeover: {len(done)} of {resources} resources complete when the first service got SIGKILL "
              f"({killed - t0:.1f} s after the create)")
        first_id = (first / "worker.id").read_text().strip()
        taken = None
        while True:
            with store.engine.connect() as conn:
                owner, status = conn.execute(select(Stack.engine_id, Stack.status).where(Stack.id == sid)).one()
            if taken is None and owner != first_id:
                taken = time.monotonic() - killed
                print(f"  taken over by {owner} {taken:.1f} s after the SIGKILL (goal < 15 s)")
            if status != "IN_PROGRESS":
                break
            if time.monotonic() - killed > 600:
                raise SystemExit("not finished 600 s after the SIGKILL")
            time.sleep(0.1)
        print(f"  CREATE_{status} {time.monotonic() - killed:.1f} s after the SIGKILL")
        with store.engine.connect() as conn:
            completes = [r for (r,) in conn.execute(select(StackEvent.resource_name).where(StackEvent.root_id == sid)
                                                    .where(StackEvent.action == "CREATE")
                                                    .where(StackEvent.status == "COMPLETE"))]
        per_resource = [c for c in completes if c != "big"]
        print(f"  every resource created once: {len(per_resource) == len(set(per_resource)) == resources}")
    finally:
        for p, _ in procs:
            p.send_signal(signal.SIGTERM)
        for p, log in procs:
            p.wait(60)
            log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--resources", type=int, default=2000)
    ap.add_argument("--db", default="sqlite", help=bench_store.HELP)
    ap.add_argument("--sync-worker", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.sync_worker:
        sync_worker(a.url, a.key, a.sync_worker, a.out)
        return
    tmp = Path(tempfile.mkdtemp(prefix="workers-bench-"))
    with bench_store.store_url(a.db, tmp) as url:
        print(f"store: {Store.display(url)}")
        power_sync(url, tmp / "nodes.key", tmp, a.nodes)
        if a.db == "sqlite":
            url = f"sqlite:///{tmp / 'stacks.db'}"
        else:  # the same database, emptied: the services' own power sync must not weigh on the takeover
            from sqlalchemy import text

            store = Store(url, tmp / "nodes.key")
            with store.engine.begin() as conn:
                for table in ("node_events", "node_ports", "nodes", "workers"):
                    conn.execute(text(f"DELETE FROM {table}"))
            store.engine.dispose()
        takeover(url, tmp / "nodes.key", tmp, a.resources)


if __name__ == "__main__":
    main()
