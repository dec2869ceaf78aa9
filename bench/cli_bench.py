"""Benchmark: what a user waits for at the command line.

    python bench/cli_bench.py [--counts 1000,10000,20000] [--heat PYTHON]

1. Cold start of the CLI (a new process each time, best of 5): `undercloud --help`, and
   `undercloud stack list` / `server list` against an idle service; then what TLS costs a
   command: one request on a new connection as the CLI makes it (https, verified by the
   home's CA) against the same request in plain HTTP on the same port (median of 200).
2. `undercloud stack create --wait` of one template of N `OS::Heat::Value` resources, end
   to end (CLI start, upload, validation, the walk, the writes, the wait), then `stack
   delete --wait`; per resource, and how the time grows against the first count (1.0: linear).
3. With `--heat PYTHON` (a Python that has `openstack-heat`, see
   ../shared/tools/heat_oracle.py): the same template of the first count created by real
   Heat's engine in one process, and the ratio.

Uses its own UNDERCLOUD_HOME (a temporary directory, removed after), its service started
with the resource and template-size limits raised for the largest count. Figures only:
nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO.parent / "shared" / "tools" / "heat_oracle.py"


def undercloud() -> list[str]:
    exe = shutil.which("undercloud")
    return [exe] if exe else [sys.executable, "-m", "undercloud"]


def run(args: list[str], env: dict, timeout: float = 3600) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{' '.join(args[-4:])}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return took


def best(args: list[str], env: dict, n: int = 5) -> float:
    return min(run(args, env) for _ in range(n))


def values_template(n: int) -> str:
    lines = ["heat_template_version: 2021-04-16\nparameters:\n  prefix: {type: string, default: v}\nresources:\n"]
    for i in range(n):
        lines.append(f"  v{i}:\n    type: OS::Heat::Value\n    properties:\n"
                     f"      value: {{list_join: ['-', [{{get_param: prefix}}, '{i}']]}}\n")
    lines.append(f"outputs:\n  last: {{value: {{get_attr: [v{n - 1}, value]}}}}\n")
    return "".join(lines)


def request_cost(home: Path, n: int = 200) -> tuple[float, float]:
    """Median ms of GET /v1/health on a new connection: as the CLI makes it (https), and plain
    (the admin token is refused on plain HTTP: a public route, the same on both)."""
    import http.client
    import statistics

    sys.path.insert(0, str(REPO))
    from undercloud import daemon
    from undercloud.config import Home, connection

    h = Home(home)
    base = daemon.url(h)
    out = []
    for connect in (lambda: connection(base, h.ca_file, 10),
                    lambda: http.client.HTTPConnection("127.0.0.1", h.api_port(), timeout=10)):
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            conn = connect()
            conn.request("GET", "/v1/health")
            conn.getresponse().read()
            conn.close()
            times.append((time.perf_counter() - t0) * 1000)
        out.append(statistics.median(times))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="1000,10000,20000", help="Value resources per stack, comma-separated")
    ap.add_argument("--heat", metavar="PYTHON", help="a Python with openstack-heat: time real Heat too")
    a = ap.parse_args()
    counts = [int(x) for x in a.counts.split(",")]
    home = Path(tempfile.mkdtemp(prefix="uc-cli-bench-"))
    biggest = values_template(max(counts))
    env = {**os.environ, "UNDERCLOUD_HOME": str(home),
           "UNDERCLOUD_MAX_RESOURCES_PER_STACK": str(max(counts) + 10),
           "UNDERCLOUD_MAX_TEMPLATE_BYTES": str(len(biggest.encode()) + 4096)}
    uc = undercloud()
    try:
        run([*uc, "service", "start"], env, timeout=120)
        print(f"CLI cold start (best of 5, {uc[0]})")
        for what in (["--help"], ["stack", "list"], ["server", "list"]):
            print(f"  undercloud {' '.join(what):<12} {best([*uc, *what], env):6.3f} s")
        tls_ms, plain_ms = request_cost(home)
        print(f"  one request on a new connection: https {tls_ms:.2f} ms, plain HTTP {plain_ms:.2f} ms "
              f"(TLS adds {tls_ms - plain_ms:.2f} ms a command)")
        print("stack create --wait of N OS::Heat::Value (one template), then stack delete --wait")
        first = None
        for n in counts:
            tpl = home / f"values-{n}.yaml"
            tpl.write_text(values_template(n))
            created = run([*uc, "stack", "create", f"v{n}", "-t", str(tpl), "--wait"], env)
            deleted = run([*uc, "stack", "delete", f"v{n}", "--wait"], env)
            per = created / n * 1000
            first = first or per
            print(f"  N={n:<6} create {created:7.2f} s ({per:5.2f} ms each, {per / first:4.2f}x the first's), "
                  f"delete {deleted:6.2f} s")
        if a.heat:
            n = counts[0]
            t0 = time.perf_counter()
            r = subprocess.run([a.heat, str(ORACLE), "-t", str(home / f"values-{n}.yaml")],
                               capture_output=True, text=True, timeout=3600)
            heat = time.perf_counter() - t0
            ok = '"CREATE_COMPLETE"' in r.stdout
            ours = first * n / 1000
            print(f"real Heat (heat_oracle.py, in-process engine), N={n}: {heat:.1f} s "
                  f"{'' if ok else '(did not complete: ' + r.stdout[-200:] + ')'}; ours {ours:.2f} s: "
                  f"{heat / ours:.0f}x faster")
    finally:
        subprocess.run([*uc, "service", "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
