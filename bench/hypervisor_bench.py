"""A lab node turned hypervisor host: what it costs, beside a server on the undercloud's own host.

    python bench/hypervisor_bench.py                 # 1 then 3 container servers on each host
    python bench/hypervisor_bench.py --counts 1,5

One run (root, libvirt, podman, Debian's PostgreSQL: tests/hypervisor_support.py makes the
store and the lab network, and removes everything after): the hypervisor host deployed
(`undercloud deploy --example hypervisor-host --hypervisor vm`: one TCG VM, its worker image
loaded, its worker started and registered); then for each count, a stack of that many
container servers on this host (the baseline, measured in the same run) and on the
hypervisor host (a flavor pinning it), each timed from `stack create` to every agent's
first check-in, and deleted (timed). The first stack on the node also fetches the 42 MB
node image from this undercloud and loads it into the node's podman; later ones find it.
Prints seconds and the ratio node / here. Figures only; nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOST = "hosts-hypervisor-0"
TEMPLATE = """\
heat_template_version: wallaby
parameters:
  count: {type: number}
  flavor: {type: string}
resources:
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def:
        type: OS::Nova::Server
        properties: {name: hvb-%index%, image: overcloud-full, flavor: {get_param: flavor}}
"""


def uc(*args: str, timeout: float = 1800) -> str:
    r = subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True, timeout=timeout,
                       cwd=REPO)
    if r.returncode:
        raise SystemExit(f"undercloud {' '.join(args)}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r.stdout


def checked_in(names: set[str]) -> bool:
    rows = {s["name"]: s for s in json.loads(uc("server", "list", "-f", "json"))}
    return all(rows.get(n, {}).get("agent_checked_in") for n in names)


def servers(template: Path, stack: str, count: int, flavor: str) -> tuple[float, float]:
    """(create -> every agent's first check-in, delete), seconds."""
    names = {f"hvb-{i}" for i in range(count)}
    start = time.monotonic()
    uc("stack", "create", stack, "-t", str(template), "-P", f"count={count}", "-P", f"flavor={flavor}", "--wait")
    while not checked_in(names):
        if time.monotonic() - start > 600:
            raise SystemExit(f"{stack}: agents did not check in within 600 s")
        time.sleep(0.2)
    up = time.monotonic() - start
    start = time.monotonic()
    uc("stack", "delete", stack, "--wait")
    return up, time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--counts", default="1,3", help="servers per stack, comma separated (default 1,3)")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",") if c]
    sys.path.insert(0, str(REPO))
    from tests import hypervisor_support

    why = hypervisor_support.why_not()
    if why:
        raise SystemExit(f"hypervisor_bench: {why}")
    with tempfile.TemporaryDirectory(prefix="hv-bench-") as tmp, \
            hypervisor_support.lab_store(Path(tmp), stacks=("hvb", "hosts")) as ls:
        template = Path(tmp) / "servers.yaml"
        template.write_text(TEMPLATE)
        uc("image", "build", "overcloud-full", "--type", "oci")  # registered before the clocks start
        start = time.monotonic()
        uc("deploy", "--example", "hypervisor-host", "--stack", "hosts", "--hypervisor", "vm",
           "-e", str(ls.store_env))
        host_s = time.monotonic() - start
        uc("flavor", "create", "pinned", "--vcpus", "1", "--ram", "256", "--disk", "5", "--property",
           "hypervisor_type=container", "--property", f"capabilities:hypervisor_hostname={HOST}")
        print(f"hypervisor host {HOST}: deployed and registered in {host_s:.1f} s (one TCG VM, from cached images)")
        print(f"{'servers':>7}  {'here: up':>9} {'delete':>7}  {'node: up':>9} {'delete':>7}  {'ratio up':>8}")
        for n in counts:
            here_up, here_del = servers(template, "hvb", n, "container")
            node_up, node_del = servers(template, "hvb", n, "pinned")
            print(f"{n:>7}  {here_up:>8.1f}s {here_del:>6.1f}s  {node_up:>8.1f}s {node_del:>6.1f}s  "
                  f"{node_up / here_up:>7.1f}x", flush=True)


if __name__ == "__main__":
    main()
