"""Agent polling at fleet scale: N simulated agents against a real undercloud service.

The service runs as `undercloud serve` in its own UNDERCLOUD_HOME; a stack gives N
OS::Heat::DeployedServer (a ResourceGroup) one software deployment each (a
SoftwareDeploymentGroup). The simulated agents speak the agent's protocol over real HTTPS,
verified by the undercloud's CA (a new connection per request, as the agent's urllib does):
GET own metadata with X-Server-Token and If-None-Match, and POST a signal for each new
deployment. The steady state and the capacity are measured with TLS and without (plain
HTTP on the same port, as agents configured before TLS): the cost of TLS per poll.

Prints: set-up time; steady state at the target rate (polls/s achieved, share of 304s,
server CPU time per poll and per agent per second, latency); closed-loop capacity (polls/s
with nothing changed); and after a config change (stack update), the time until the last
agent has fetched and applied (signalled) its new deployment, and until the stack is
UPDATE_COMPLETE. With --long-poll, the same for agents holding long-polls of --hold s: the
idle cost (CPU per held poll, per agent per second) and the change's latency.

    python bench/agent_bench.py [--agents 2000] [--rate 330] [--seconds 15] [--long-poll [--hold 25]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  count: {type: number}
  value: {type: string, default: v1}
resources:
  servers:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def: {type: OS::Heat::DeployedServer}
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      inputs: [{name: value}]
      config: "#!/bin/sh\\necho $value\\n"
  deployments:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {get_resource: config}
      servers: {get_attr: [servers, refs_map]}
      input_values: {value: {get_param: value}}
"""

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Agent:
    def __init__(self, cfg: dict, host: str, port: int, tls=None):
        self.id, self.token = cfg["server_id"], cfg["token"]
        self.host, self.port = host, port
        self.tls = tls  # an SSLContext trusting the undercloud's CA, None: plain HTTP
        self.etag: str | None = None
        self.done: set[str] = set()
        self.applied_at: float | None = None  # when the latest change was applied

    async def http(self, method: str, path: str, headers: dict, body: bytes = b"") -> tuple[int, dict, bytes]:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.tls)
        try:
            head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nConnection: close\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            if body:
                head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"\r\n" + body)
            await writer.drain()
            status_line = await reader.readline()
            status = int(status_line.split()[1])
            hdrs = {}
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                k, v = line.decode().split(":", 1)
                hdrs[k.strip().lower()] = v.strip()
            n = int(hdrs.get("content-length", 0))
            data = await reader.readexactly(n) if n else b""
            return status, hdrs, data
        finally:
            writer.close()

    async def poll(self, stats: dict, wait: float = 0) -> None:
        headers = {"X-Server-Token": self.token}
        if self.etag:
            headers["If-None-Match"] = self.etag
        t0 = time.perf_counter()
        query = f"?wait={wait:.1f}" if wait else ""
        status, hdrs, body = await self.http("GET", f"/v1/agent/servers/{self.id}/metadata{query}", headers)
        if not wait:
            stats["latency"].append(time.perf_counter() - t0)
        stats[status] = stats.get(status, 0) + 1
        if status == 200:
            self.etag = hdrs.get("etag")
            doc = json.loads(body)
            for d in doc.get("deployments", []):
                if d["id"] in self.done:
                    continue
                value = next((i["value"] for i in d["inputs"] if i["name"] == "value"), None)
                sig = json.dumps({"deploy_stdout": f"{value}\n", "deploy_stderr": "", "deploy_status_code": 0})
                s, _h, _b = await self.http("POST", f"/v1/agent/servers/{self.id}/deployments/{d['id']}/signal",
                                            {"X-Server-Token": self.token}, sig.encode())
                if s == 200:
                    self.done.add(d["id"])
                    self.applied_at = time.monotonic()


async def paced(agents: list[Agent], rate: float, seconds: float, stats: dict, until=None,
                long_poll: float = 0) -> float:
    """Each agent polls every len(agents)/rate seconds (+-25 % jitter), for `seconds` or,
    with `until` (a blocking predicate, checked every second), until it holds. With
    `long_poll` (seconds) each poll asks the server to hold it that long (?wait=), +-25 %."""
    interval = len(agents) / rate
    end = time.monotonic() + seconds
    sem = asyncio.Semaphore(512)
    stop = asyncio.Event()

    async def one(a: Agent):
        await asyncio.sleep(random.uniform(0, interval))
        while long_poll and time.monotonic() < end and not stop.is_set():
            try:
                await a.poll(stats, wait=min(long_poll * random.uniform(0.75, 1.25), max(end - time.monotonic(), 0.1)))
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                stats["errors"] = stats.get("errors", 0) + 1
                await asyncio.sleep(1)
        while time.monotonic() < end and not stop.is_set():
            async with sem:
                try:
                    await a.poll(stats)
                except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                    stats["errors"] = stats.get("errors", 0) + 1
            pause = min(interval * random.uniform(0.75, 1.25), end - time.monotonic())
            if pause > 0:
                try:
                    await asyncio.wait_for(stop.wait(), pause)
                except TimeoutError:
                    pass

    async def watch():
        while until is not None and time.monotonic() < end:
            if await asyncio.to_thread(until):
                stop.set()
                return
            await asyncio.sleep(1)

    t0 = time.monotonic()
    await asyncio.gather(watch(), *(one(a) for a in agents))
    return time.monotonic() - t0


async def closed_loop(agents: list[Agent], concurrency: int, seconds: float, stats: dict) -> float:
    end = time.monotonic() + seconds

    async def worker(i: int):
        while time.monotonic() < end:
            a = agents[random.randrange(len(agents))]
            try:
                await a.poll(stats)
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                stats["errors"] = stats.get("errors", 0) + 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return time.monotonic() - t0


def new_stats() -> dict:
    return {"latency": []}


def report(name: str, stats: dict, elapsed: float, cpu: float, agents: int = 0) -> None:
    polls = sum(v for k, v in stats.items() if isinstance(k, int))
    lat = sorted(stats["latency"])
    print(f"{name}: {polls} polls in {elapsed:.1f} s = {polls / elapsed:.0f} polls/s; "
          f"304: {stats.get(304, 0) / max(polls, 1):.1%}, 200: {stats.get(200, 0)}, errors: {stats.get('errors', 0)}; "
          f"server CPU {cpu:.2f} s = {1000 * cpu / max(polls, 1):.3f} ms/poll"
          + (f", idle cost {1e6 * cpu / elapsed / agents:.0f} us of CPU per agent per second" if agents else "")
          + (f"; latency p50 {1000 * statistics.median(lat):.1f} ms, p99 {1000 * lat[int(len(lat) * 0.99) - 1]:.1f} ms"
             if lat else ""), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=330.0, help="target polls/s of the whole fleet")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--concurrency", type=int, default=32, help="closed-loop capacity test")
    ap.add_argument("--long-poll", action="store_true",
                    help="also measure long-polling agents (?wait=): steady state and change propagation")
    ap.add_argument("--hold", type=float, default=25.0,
                    help="with --long-poll: the wait each long-poll asks (the agent's `hold`, 25 s)")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="agent-bench-"))
    os.environ["UNDERCLOUD_HOME"] = str(home)
    # Agents told an http:// URL (configured before TLS): their tokens are taken over TLS and
    # plain HTTP alike, so both phases do the same work (the agents dial the port themselves).
    os.environ["UNDERCLOUD_AGENT_URL"] = "http://127.0.0.1:9"
    from undercloud import daemon
    from undercloud.cli.client import Client
    from undercloud.config import Home

    try:
        tmpl = home / "fleet.yaml"
        tmpl.write_text(TEMPLATE)
        client = Client(timeout=600)
        pid = daemon.pid(Home(home))
        port = int((home / "port").read_text())
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "undercloud", "stack", "create", "fleet", "-t", str(tmpl),
                        "--parameter", f"count={args.agents}"], check=True, capture_output=True)
        configs = []
        while len(configs) < args.agents:
            configs = list((home / "agents").glob("*.json"))
            time.sleep(0.2)
        configs = [json.loads(p.read_text()) for p in configs]
        tls = ssl.create_default_context(cafile=str(Home(home).ca_file))
        agents = [Agent(c, "127.0.0.1", port, tls) for c in configs]
        print(f"set-up: {args.agents} DeployedServers (agent configs written) "
              f"{time.monotonic() - t0:.1f} s after the create request", flush=True)

        # First contact: every agent fetches its document and signals its deployment, polling
        # again until the stack has published and received them all.
        while True:
            stats = new_stats()
            asyncio.run(closed_loop_all([a for a in agents if not a.done], stats))
            if all(a.done for a in agents) and stack_status(client, "fleet") == "CREATE_COMPLETE":
                break
            time.sleep(0.5)
        print(f"first contact: {len(agents)} agents fetched + signalled, stack CREATE_COMPLETE "
              f"{time.monotonic() - t0:.1f} s after the create request", flush=True)

        for how, context in (("TLS", tls), ("plain HTTP", None), ("TLS", tls)):  # TLS twice: warmed alike
            for a in agents:
                a.tls = context
            stats = new_stats()
            c0 = cpu_seconds(pid)
            elapsed = asyncio.run(paced(agents, args.rate, args.seconds, stats))  # nothing changes
            report(f"steady state at {args.rate:.0f} polls/s offered, {how}", stats, elapsed,
                   cpu_seconds(pid) - c0, len(agents))

            stats = new_stats()
            c0 = cpu_seconds(pid)
            elapsed = asyncio.run(closed_loop(agents, args.concurrency, args.seconds / 2, stats))
            report(f"capacity (closed loop, {args.concurrency} concurrent, nothing changed), {how}", stats,
                   elapsed, cpu_seconds(pid) - c0)

        # A config change: the agents keep polling at the target rate.
        for a in agents:
            a.applied_at = None
        stats = new_stats()
        t_change = time.monotonic()
        subprocess.run([sys.executable, "-m", "undercloud", "stack", "update", "fleet", "-t", str(tmpl),
                        "--parameter", f"count={args.agents}", "--parameter", "value=v2"],
                       check=True, capture_output=True)
        interval = args.agents / args.rate
        t_done: list[float] = []

        armed = [True]  # converged() counts only after the update request returned

        def converged() -> bool:
            if armed[0] and stack_status(client, "fleet") == "UPDATE_COMPLETE":
                t_done.append(time.monotonic())
                return all(a.applied_at for a in agents)
            return False
        asyncio.run(paced(agents, args.rate, 900, stats, until=converged))
        change_report("config change (polling)", agents, t_change, t_done, f"poll interval {interval:.1f} s +-25 %")

        if args.long_poll:
            stats = new_stats()
            # every agent holding a poll: the window covers two holds and the CPU is read inside it
            window = max(args.seconds, 2 * args.hold + interval)

            async def idle_long_polls() -> tuple[float, float]:
                task = asyncio.create_task(paced(agents, args.rate, window, stats, long_poll=args.hold))
                await asyncio.sleep(interval)  # all started (each after up to one interval)
                c0, t0 = cpu_seconds(pid), time.monotonic()
                await asyncio.sleep(window - 2 * interval)
                cpu, elapsed = cpu_seconds(pid) - c0, time.monotonic() - t0
                await task
                return cpu, elapsed
            cpu, elapsed = asyncio.run(idle_long_polls())
            report(f"long-poll steady state (each held ~{args.hold:.0f} s +-25 %, CPU over {elapsed:.0f} s "
                   "inside the window)", stats, window, cpu * window / elapsed, len(agents))
            for a in agents:
                a.applied_at = None
            t_done.clear()
            armed[0] = False

            async def change_while_long_polling():
                task = asyncio.create_task(paced(agents, args.rate, 900, new_stats(), until=converged,
                                                 long_poll=args.hold))
                await asyncio.sleep(interval * 1.5)  # every agent is holding a long-poll
                nonlocal_t[0] = time.monotonic()
                r = await asyncio.to_thread(subprocess.run, [
                    sys.executable, "-m", "undercloud", "stack", "update", "fleet", "-t", str(tmpl),
                    "--parameter", f"count={args.agents}", "--parameter", "value=v3"],
                    capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(f"stack update failed: {r.stderr.strip()}")
                armed[0] = True
                await task
            nonlocal_t = [0.0]
            asyncio.run(change_while_long_polling())
            change_report("config change (long-poll)", agents, nonlocal_t[0], t_done, "changes wake held polls")
    finally:
        daemon.stop(Home(home))
        shutil.rmtree(home, ignore_errors=True)
    return 0


def change_report(name: str, agents: list[Agent], t_change: float, t_done: list[float], how: str) -> None:
    applied = sorted(a.applied_at - t_change for a in agents if a.applied_at)
    if not t_done or not applied:
        raise SystemExit(f"{name}: the stack update did not complete")
    print(f"{name}: {len(applied)}/{len(agents)} agents applied it; first {applied[0]:.1f} s, "
          f"median {statistics.median(applied):.1f} s, "
          f"last {applied[-1]:.1f} s after the update request ({how}); stack UPDATE_COMPLETE seen "
          f"{t_done[0] - t_change:.1f} s after it (checked every 1 s)", flush=True)


async def closed_loop_all(agents: list[Agent], stats: dict) -> None:
    sem = asyncio.Semaphore(64)

    async def one(a):
        async with sem:
            try:
                await a.poll(stats)
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                stats["errors"] = stats.get("errors", 0) + 1
    await asyncio.gather(*(one(a) for a in agents))


def stack_status(client, name: str) -> str:
    s = client.get(f"/v1/stacks/{name}")
    if s.get("stack_status", "").endswith("FAILED"):
        raise SystemExit(f"stack {name}: {s.get('stack_status')}: {s.get('stack_status_reason')}")
    return s.get("stack_status", "")


if __name__ == "__main__":
    sys.exit(main())
