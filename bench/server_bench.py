"""Time from `stack create` to agent check-in, per hypervisor type.

    python bench/server_bench.py                       # container: 1 then 10 servers
    python bench/server_bench.py --types container,vm --counts 1,10
    python bench/server_bench.py --home $UNDERCLOUD_HOME --types baremetal   # after lab up + node import --provide
    python bench/server_bench.py --types vm,baremetal --lab   # a one-node lab made (and removed) for it
    python bench/server_bench.py --types baremetal --lab --lab-nodes 3 --lab-bmc ipmi   # 3 nodes by PXE
    python bench/server_bench.py --fake 1000         # control-plane cost only: fake machines
    python bench/server_bench.py --fake 300 --hosts 1,10,100   # placement over more hosts
    python bench/server_bench.py --home $UNDERCLOUD_HOME --types openstack:host --counts 1,3 \
        --cloud-flavor m1.small --cloud-network lab   # servers of a cloud of `undercloud cloud add`

For each type and count: a stack of one OS::Heat::ResourceGroup of `count` servers
(flavor = the type's default flavor, image `overcloud-full`) is created through the API;
the clock stops when every server's agent has fetched its metadata (its first check-in).
Then the stack is deleted and that is timed too. A type is skipped, saying why, when this
undercloud cannot realise it (no realiser, no image of that type, no available node for
bare metal: run `undercloud lab up` + `node import --provide` first).

`--fake N` runs the same stack in-process with N servers on a fake realiser (no machine, no
agent): what the engine, the servers service and the store cost per server.

Goals (issue "Provisioning II"): under 3 s per container server, 10 containers in
parallel under 15 s. Ironic takes 10-20 minutes per real machine. Figures only; nothing
here passes or fails on time. Uses its own UNDERCLOUD_HOME (a temporary directory) unless
--home is given, and removes its stacks (and that directory) at the end.
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

TEMPLATE = """\
heat_template_version: wallaby
parameters:
  count: {type: number}
  flavor: {type: string}
  networks: {type: json, default: []}
resources:
  group:
    type: OS::Heat::ResourceGroup
    properties:
      count: {get_param: count}
      resource_def:
        type: OS::Nova::Server
        properties:
          name: bench%index%
          image: overcloud-full
          flavor: {get_param: flavor}
          networks: {get_param: networks}
"""
FLAVORS = {"container": "container", "vm": "vm", "baremetal": "baremetal"}
IMAGE_TYPES = {"container": "oci", "vm": "qcow2", "baremetal": "qcow2"}


def cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
                          timeout=timeout)


def image_type(ht: str) -> str:
    return "vm" if ht.startswith("openstack:") else ht  # another cloud's servers run the VM image


def why_not(client, ht: str) -> str | None:
    from undercloud.errors import UndercloudError

    images = [i for i in client.get("/v1/images", params={"name": "overcloud-full"})
              if i.get("hypervisor_type") == image_type(ht)]
    if not images:
        r = cli("image", "build", "overcloud-full", "--type", IMAGE_TYPES[image_type(ht)])
        if r.returncode != 0:
            return f"no {ht} overcloud-full image and building it failed: {r.stderr.strip().splitlines()[-1:]}"
    if ht == "baremetal":
        try:
            avail = client.get("/v1/nodes", params={"provision_state": "available"})
        except UndercloudError as exc:
            return str(exc)
        if not avail:
            return "no available node (undercloud lab up --nodes 1; node import --provide)"
    return None


def lab_node(home: Path, bmc: str = "redfish", nodes: int = 1) -> None:
    """`--lab`: a lab of `nodes` nodes behind `bmc` BMCs in this home, enrolled and available
    (bare metal; redfish nodes boot the ramdisk by virtual media, ipmi ones by PXE)."""
    import json

    from undercloud.config import Home
    from undercloud.lab.lab import Lab

    for args in (("image", "build", "deploy-ramdisk"),
                 ("lab", "up", "--nodes", str(nodes), "--bmc", bmc, "--memory", "2048", "--disk", "8")):
        r = cli(*args)
        if r.returncode != 0:
            raise SystemExit(f"--lab: {' '.join(args[:2])} failed: {r.stderr.strip()}")
    env = Lab(Home(home)).instackenv
    if json.loads(cli("node", "list", "-f", "json").stdout or "[]"):
        return
    r = cli("node", "import", str(env), "--provide")
    if r.returncode != 0:
        raise SystemExit(f"--lab: node import failed: {r.stderr.strip()}")


def run_one(client, ht: str, count: int, template: Path, timeout: float, args) -> dict:
    import json

    name = f"bench-{ht.replace(':', '-')}-{count}"
    flavor, networks = FLAVORS.get(ht), []
    if ht.startswith("openstack:"):
        flavor, networks = f"{ht}/{args.cloud_flavor}", [{"network": args.cloud_network}]
    bundle_cmd = ["stack", "create", name, "-t", str(template), "--parameter", f"count={count}",
                  "--parameter", f"flavor={flavor}", "--parameter", f"networks={json.dumps(networks)}"]
    t0 = time.monotonic()
    r = cli(*bundle_cmd)
    if r.returncode != 0:
        raise SystemExit(f"{name}: stack create failed: {r.stderr.strip()}")
    created_at = None
    checked: dict[str, float] = {}
    while True:
        servers = [s for s in client.get("/v1/servers") if s["name"].startswith("bench")]
        for s in servers:
            if s["status"] == "ERROR":
                raise SystemExit(f"{name}: server {s['name']} ERROR: {s['fault']}")
            if s["agent_checked_in"] and s["id"] not in checked:
                checked[s["id"]] = time.monotonic() - t0
        stack = client.get(f"/v1/stacks/{name}")
        if created_at is None and stack["stack_status"] == "CREATE_COMPLETE":
            created_at = time.monotonic() - t0
        if stack["stack_status"].endswith("FAILED"):
            raise SystemExit(f"{name}: {stack['stack_status']}: {stack.get('stack_status_reason')}")
        if len(checked) == count and created_at is not None:
            break
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"{name}: only {len(checked)}/{count} agents checked in after {timeout:.0f} s")
        time.sleep(0.05)
    total = max(checked.values())
    t1 = time.monotonic()
    r = cli("stack", "delete", name, "--wait")
    deleted = time.monotonic() - t1
    if r.returncode != 0:
        raise SystemExit(f"{name}: stack delete failed: {r.stderr.strip()}")
    return {"type": ht, "count": count, "stack_complete_s": created_at, "all_checked_in_s": total,
            "first_checked_in_s": min(checked.values()), "per_server_s": total / count, "delete_s": deleted}


def run_fake(count: int, hosts: int = 1) -> None:
    """In-process: N servers of the container flavor realised by FakeRealiser; `hosts`
    registered container hosts, all up, this one the roomiest (so every server is placed
    here, each placement weighing them all)."""
    import hashlib
    import resource

    from undercloud.api.context import Context
    from undercloud.config import Home
    from undercloud.orchestration.template import Bundle
    from undercloud.provisioning.servers.base import Env
    from undercloud.provisioning.servers.fake import FakeRealiser
    from undercloud.provisioning.servers.service import ServersService

    home = Path(tempfile.mkdtemp(prefix="uc-server-bench-fake-"))
    ctx = Context(Home(home))
    others = {f"fake-host-{i}" for i in range(1, hosts)}
    env = Env(home=ctx.home, api_port=1, images=ctx.images, hosts_up=lambda: others)
    fake = FakeRealiser(env, "container")
    ctx.__dict__["servers"] = ServersService(ctx.store, env, realisers={"container": fake})
    ctx.servers.startup()
    content = b"fake oci"
    sha = hashlib.sha256(content).hexdigest()
    ctx.images.put_blob([content], sha, len(content))
    ctx.images.register([{"name": "overcloud-full", "disk_format": "oci", "sha256": sha,
                          "properties": {"hypervisor_type": "container"}}])
    ctx.servers.flavors.create("tiny", 1, 1, 0, {"hypervisor_type": "container"})
    from undercloud.config import host_name
    from undercloud.store.servers import HypervisorHost

    with ctx.store.session() as s:  # room for every fake server
        here = s.get(HypervisorHost, (host_name(), "container"))
        here.memory_mb, here.vcpus = 10**9, 10**6
        for name in others:
            s.add(HypervisorHost(name=name, hypervisor_type="container", vcpus=10**6, memory_mb=10**8,
                                 disk_gb=10**6))
    (home / "bench.yaml").write_text(TEMPLATE)
    bundle = Bundle.from_paths(str(home / "bench.yaml")).to_json()
    t0 = time.monotonic()
    ctx.stacks.create("fake", bundle, {"count": count, "flavor": "tiny"}, wait=True)
    created = time.monotonic() - t0
    shown = ctx.stacks.show("fake")
    status = shown["stack_status"]
    if status != "CREATE_COMPLETE":
        print(f"fake x{count}: {status}: {shown['stack_status_reason']}")
    t1 = time.monotonic()
    ctx.stacks.delete("fake", wait=True)
    deleted = time.monotonic() - t1
    ctx.stacks.stop()
    shutil.rmtree(home, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"fake      x{count:<5} {hosts:4} hosts {status}: create {created:6.2f} s "
          f"({created / count * 1000:5.1f} ms/server, "
          f"token + first-boot file + record + placement + engine) | delete {deleted:6.2f} s | "
          f"peak RSS {peak:.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default="container", help="comma-separated: container, vm, baremetal")
    ap.add_argument("--counts", default="1,10", help="comma-separated server counts (vm/baremetal: 1 only)")
    ap.add_argument("--home", help="UNDERCLOUD_HOME to use (default: a new temporary one)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run before giving up")
    ap.add_argument("--fake", type=int, metavar="N", help="only the in-process run of N fake servers")
    ap.add_argument("--hosts", default="1", help="--fake: comma-separated counts of registered hypervisor hosts")
    ap.add_argument("--cloud-flavor", default="m1.small", help="openstack:<cloud>: a flavor of that cloud")
    ap.add_argument("--cloud-network", default="lab", help="openstack:<cloud>: a network of that cloud")
    ap.add_argument("--lab", action="store_true",
                    help="baremetal: bring up a virtual lab in this home first (taken down at the end)")
    ap.add_argument("--lab-nodes", type=int, default=1, help="--lab: its nodes, all deployed at once")
    ap.add_argument("--lab-bmc", choices=("redfish", "ipmi"), default="redfish",
                    help="--lab: redfish (virtual media) or ipmi (network boot)")
    args = ap.parse_args()
    if args.fake:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        for hosts in [int(x) for x in args.hosts.split(",")]:
            run_fake(args.fake, hosts)
        return 0
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="uc-server-bench-"))
    os.environ["UNDERCLOUD_HOME"] = str(home)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from undercloud import daemon
    from undercloud.cli.client import Client
    from undercloud.config import Home

    template = home / "bench.yaml"
    home.mkdir(parents=True, exist_ok=True)
    template.write_text(TEMPLATE)
    client = Client(Home(home), timeout=600)
    rows = []
    try:
        for ht in [t.strip() for t in args.types.split(",") if t.strip()]:
            if ht == "baremetal" and args.lab:
                lab_node(home, args.lab_bmc, args.lab_nodes)
            reason = why_not(client, ht)
            if reason:
                print(f"{ht}: skipped: {reason}")
                continue
            counts = [int(c) for c in args.counts.split(",")]
            if ht in ("vm", "baremetal"):
                counts = [1]  # software-emulated VMs are slow: one is the figure that matters
            if ht == "baremetal" and args.lab:
                counts = [args.lab_nodes]
            for count in counts:
                row = run_one(client, ht, count, template, args.timeout, args)
                rows.append(row)
                label = f"{ht}/{'pxe' if args.lab_bmc == 'ipmi' else 'media'}" if ht == "baremetal" and args.lab else ht
                print(f"{label:14} x{count:<3} stack COMPLETE {row['stack_complete_s']:6.2f} s | "
                      f"first agent {row['first_checked_in_s']:6.2f} s | all agents {row['all_checked_in_s']:6.2f} s "
                      f"| {row['per_server_s']:5.2f} s/server | delete {row['delete_s']:5.2f} s", flush=True)
    finally:
        if args.lab or not args.home:  # the lab (bare metal) or lab network (VMs) this run made
            from undercloud.lab.lab import Lab, available

            if available() is None:
                Lab(Home(home)).down()
        if not args.home:
            daemon.stop(Home(home))
            shutil.rmtree(home, ignore_errors=True)
    goals = {("container", 1): 3.0, ("container", 10): 15.0}
    for row in rows:
        goal = goals.get((row["type"], row["count"]))
        if goal:
            print(f"goal {row['type']} x{row['count']}: {row['all_checked_in_s']:.2f} s vs {goal:.0f} s "
                  f"(ratio {row['all_checked_in_s'] / goal:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
