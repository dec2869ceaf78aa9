"""Deploy benchmark: the overcloud on container nodes from cached images to healthy, a no-op
re-deploy, and the cloud it makes: `server create` to ACTIVE and to the guest's first
console line. Prints figures and ratios to the goals; never pass/fail.

Goals: minimal (a controller and a compute node) < 120 s, ha < 150 s (issue 14), no-op < 10 s, an
instance ACTIVE < 30 s and its first console line < 60 s (software emulation). Day 2 on
container nodes: keystone healthy again after kill -9 of its process < 15 s and after
SIGSTOP (hung) < 45 s, with no command (podman's restart policy; the agent's watchdog); a
deploy that repairs a service stopped by hand < 30 s; on ha, a rolling update of keystone
(a new image, node by node over the three controllers; its build not counted) < 60 s and
`overcloud rollback` of it < 60 s; (no goal) a lost controller replaced; the controller holding
the virtual IP lost as a whole: a token through the VIP again < 10 s, and (no goal) the
lost controller powered on to healthy.

    python3 bench/deploy_bench.py [--only minimal|ha] [--computes 1,2,3] [--hypervisor container|vm]
                                  [--deploy-only]

Beside each deploy's time: the CPU seconds it used (the whole machine, and the overcloud's
containers alone, from their cgroups) over the machine's cores, the least time that work
can take here: a deploy that keeps every core busy is bound by it, not by waits. The
containers' CPU seconds are also printed per service container (summed over the nodes), to
show where a deploy's CPU goes. `--deploy-only` measures the deploys alone (then deletes).

`minimal` runs once per ComputeCount of --computes (each a fresh deploy in its own
UNDERCLOUD_HOME, deleted afterwards, its delete timed too), and boots as many instances
as there are compute nodes, at once, to show how both grow with the number of nodes.
Needs root, podman and debootstrap; the first run builds the images (not timed: a warm-up
`undercloud image build --all` and `guest-tiny` run first). With `--hypervisor vm` the
nodes are libvirt VMs (TCG here) and only identity and placement are deployed (compute in
an emulated VM would emulate twice); no instances are booted.
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

GOALS = {"minimal": 120.0, "ha": 150.0, "no-op": 10.0, "active": 30.0, "console": 60.0,
         "kill -9": 15.0, "SIGSTOP": 45.0, "repair": 30.0, "update": 60.0, "rollback": 60.0, "failover": 10.0}
CONTROL_PLANE_ONLY = """\
parameter_defaults: {ComputeCount: 0}
resource_registry:
""" + "".join(f"  OS::TripleO::Services::{s}: OS::Heat::None\n" for s in (
    "GlanceApi", "NovaApi", "NovaConductor", "NovaScheduler", "NovaMetadata", "NeutronServer",
    "NeutronLinuxbridgeAgent", "NeutronDhcpAgent", "NeutronMetadataAgent"))


def cli(home: str, *args: str, timeout: float = 2400) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
                       env={**os.environ, "UNDERCLOUD_HOME": home}, timeout=timeout)
    took = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"`undercloud {' '.join(args)}` failed:\n{p.stderr[-3000:]}")
    return took, p


def openstack(home: str, *args: str, timeout: float = 600):
    clouds = os.path.join(home, "overcloud", "overcloud", "clouds.yaml")
    p = subprocess.run(["openstack", "--os-cloud", "overcloud", *args], capture_output=True, text=True,
                       env={**os.environ, "OS_CLIENT_CONFIG_FILE": clouds}, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"`openstack {' '.join(args)}` failed:\n{p.stderr[-2000:]}")
    return p.stdout


def stack_seconds(stderr: str) -> float | None:
    """The deploy's own figure: from stack create/update to healthy (images excluded)."""
    for line in stderr.splitlines():
        if line.startswith("stack ") and "_COMPLETE in " in line:
            try:
                return float(line.split("_COMPLETE in ", 1)[1].split()[0])
            except ValueError:
                pass
    return None


def boot(home: str, guest: str, count: int) -> tuple[float, float]:
    """`count` instances at once: seconds from `server create` to all ACTIVE, and to every
    guest's first console line (read through Nova)."""
    openstack(home, "image", "create", "guest", "--file", guest, "--disk-format", "qcow2", "--container-format", "bare")
    openstack(home, "network", "create", "net1")
    openstack(home, "subnet", "create", "--network", "net1", "--subnet-range", "192.168.77.0/24", "sub1")
    openstack(home, "flavor", "create", "tiny", "--vcpus", "1", "--ram", "128", "--disk", "1")
    start = time.monotonic()
    openstack(home, "server", "create", "--image", "guest", "--flavor", "tiny", "--network", "net1",
              "--min", str(count), "--max", str(count), "--wait", "vm")
    active = time.monotonic() - start
    names = [s["Name"] for s in json.loads(openstack(home, "server", "list", "-f", "json"))]
    pending = set(names)
    while pending and time.monotonic() - start < 600:
        for n in sorted(pending):
            if "guest-tiny:" in openstack(home, "console", "log", "show", n):
                pending.discard(n)
        time.sleep(1)
    if pending:
        sys.exit(f"no console line from {sorted(pending)} within 600 s")
    return active, time.monotonic() - start


def machine_cpu() -> float:
    """CPU seconds the whole machine has used since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def processes_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (command, CPU seconds it and its waited-for children used) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(d)] = (cmd[:60] or stat.split("(", 1)[1].split(")")[0],
                       sum(int(x) for x in fields[11:15]) / tick)
    return out


def busiest_outside(before: dict, after: dict, cgroup_paths: set[str], top: int = 8) -> list[tuple[str, float]]:
    """The processes outside the overcloud's containers that used the most CPU between two
    processes_cpu() snapshots (those that exited meanwhile count in their parent's figure)."""
    rows = []
    for pid, (cmd, cpu) in after.items():
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                cg = f.read()
        except OSError:
            continue
        if any(p and p in cg for p in cgroup_paths):
            continue
        used = cpu - before.get(pid, (cmd, 0.0))[1]
        if used > 0.5:
            rows.append((f"{pid} {cmd}", used))
    return sorted(rows, key=lambda r: -r[1])[:top]


def cgroup_cpu(path: str) -> float:
    """CPU seconds of one cgroup: cgroup v2 (or v1's unified hierarchy), else v1's cpuacct;
    0 for a container that is not running (it has no cgroup)."""
    for v2 in (Path("/sys/fs/cgroup", path, "cpu.stat"), Path("/sys/fs/cgroup/unified", path, "cpu.stat")):
        try:
            lines = v2.read_text().splitlines()
        except OSError:
            continue
        return next((int(x.split()[1]) / 1e6 for x in lines if x.startswith("usage_usec ")), 0.0)
    try:
        return int(Path("/sys/fs/cgroup/cpuacct", path, "cpuacct.usage").read_text()) / 1e9
    except OSError:
        return 0.0


CGROUPS: set[str] = set()  # the last containers_cpu()'s cgroups (their last path part)


def containers_cpu(home: str) -> tuple[float, int, dict[str, float]]:
    """(CPU seconds, count, CPU seconds per container summed over the nodes) of this home's
    overcloud containers, from their cgroups: what the nodes and their services used,
    whatever else the machine ran meanwhile. A node container itself (its agent) counts as
    `<role> node`; a service container as `<pod>/<container>`."""
    from undercloud.config import Home

    prefix = f"{Home(Path(home)).instance}-"
    ids = podman("ps", "-a", "-q", "--filter", f"name=^{prefix}").split()
    rows = podman("inspect", "--format", "{{.Name}} {{.State.CgroupPath}}", *ids).splitlines() if ids else []
    total, per = 0.0, {}
    CGROUPS.clear()
    for row in rows:
        name, _, cgroup = row.strip().partition(" ")
        CGROUPS.add(cgroup.strip().rsplit("/", 1)[-1])
        cpu = cgroup_cpu(cgroup.lstrip("/")) if cgroup else 0.0
        total += cpu
        rest = name.removeprefix(prefix).split("-")  # overcloud-controller-0[-pod-...-container]
        role = rest[1] if len(rest) > 1 else name
        key = f"{role} node" if len(rest) <= 3 else "-".join(rest[3:])
        per[key] = per.get(key, 0.0) + cpu
    return total, len(ids), per


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120).stdout.strip()


def day2(home: str, how: list[str]) -> list[tuple[str, float, str]]:
    """Self-healing and drift repair on the first controller (container nodes): seconds
    until keystone answers again after kill -9 and after SIGSTOP of its process, and a
    deploy that finds memcached stopped (its watchdog paused) and repairs it."""
    from undercloud.cli.overcloud import probe

    node = "overcloud-controller-0"
    from undercloud.config import Home

    prefix = f"{Home(Path(home)).instance}-{node}"
    rows = json.loads(cli(home, "overcloud", "status", "-f", "json")[1].stdout)
    address = next(r["address"] for r in rows if r["node"] == node)
    out = []
    for sig, key in (("KILL", "kill -9"), ("STOP", "SIGSTOP")):
        pid = podman("inspect", f"{prefix}-keystone-keystone", "--format", "{{.State.Pid}}")
        start = time.monotonic()
        os.kill(int(pid), getattr(signal, f"SIG{sig}"))
        while time.monotonic() - start < 300:
            now = podman("inspect", f"{prefix}-keystone-keystone", "--format", "{{.State.Pid}}")
            if now not in ("0", pid) and probe(address, "HTTP GET :15000/v3") == "healthy":
                break
            time.sleep(0.5)
        out.append((f"keystone healthy again after {key}", time.monotonic() - start, key))
    flag = "/var/lib/undercloud-agent/kube/watchdog.pause"
    podman("exec", prefix, "touch", flag)
    try:
        podman("stop", "-t", "2", f"{prefix}-memcached-memcached")
        took, p = cli(home, "deploy", *how)
        assert "repaired: memcached on" in p.stderr, p.stderr[-1000:]
        out.append(("deploy repairing memcached stopped by hand", took, "repair"))
    finally:
        podman("exec", prefix, "rm", "-f", flag)
    return out


def rolling(home: str, tmp: str) -> list[tuple[str, float, str]]:
    """A rolling update of keystone to a new image (the shipped element with one file more,
    built first and not timed) on every controller, node by node, then its rollback."""
    import shutil

    import undercloud

    variant = os.path.join(tmp, "keystone-variant")
    element = os.path.join(variant, "keystone")
    shutil.copytree(os.path.join(os.path.dirname(undercloud.__file__), "images", "elements", "keystone"), element,
                    dirs_exist_ok=True)
    os.makedirs(os.path.join(element, "static", "etc", "keystone"), exist_ok=True)
    with open(os.path.join(element, "static", "etc", "keystone", "uc-variant"), "w") as f:
        f.write("bench\n")
    cli(home, "image", "build", "service-keystone", "--elements-path", variant)
    up, p = cli(home, "overcloud", "update", "--service", "keystone", "--elements-path", variant)
    assert "update: complete" in p.stderr, p.stderr[-1000:]
    back, p = cli(home, "overcloud", "rollback")
    assert "rollback: complete" in p.stderr, p.stderr[-1000:]
    return [("rolling update of keystone, node by node (built before)", up, "update"),
            ("overcloud rollback of it", back, "rollback")]


def replace_node(home: str) -> list[tuple[str, float, str | None]]:
    """A whole controller lost (its node container and the service containers joined to
    it, removed) and `overcloud replace` of it, until its services are healthy."""
    from undercloud.config import Home

    node = "overcloud-controller-2"
    prefix = f"{Home(Path(home)).instance}-{node}"
    joined = podman("ps", "-aq", "--filter", f"label=undercloud.node={prefix}").split()
    podman("rm", "-f", "-t", "0", *joined)
    podman("rm", "-f", "-t", "0", prefix)  # after them: podman refuses a container with dependents
    took, p = cli(home, "overcloud", "replace", node, "--yes")
    assert p.returncode == 0 and f"{node} replaced" in p.stderr, p.stderr[-1000:]
    return [(f"{node} lost, then `overcloud replace` to healthy", took, None)]


def token(auth: dict, cacert: str | None = None) -> bool:
    """One password token request to keystone (through the VIP and haproxy, its public TLS
    port verified with `cacert`, clouds.yaml's): did it succeed?"""
    import ssl
    import urllib.request

    scope = {"project": {"name": auth["project_name"], "domain": {"name": auth["project_domain_name"]}}}
    user = {"name": auth["username"], "domain": {"name": auth["user_domain_name"]}, "password": auth["password"]}
    body = json.dumps({"auth": {"identity": {"methods": ["password"], "password": {"user": user}},
                                "scope": scope}}).encode()
    req = urllib.request.Request(auth["auth_url"].rstrip("/") + "/auth/tokens", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        context = ssl.create_default_context(cafile=cacert) if cacert else None
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return resp.status == 201
    except OSError:
        return False


def failover(home: str) -> list[tuple[str, float, str | None]]:
    """The controller holding the virtual IP lost as a whole (its service containers and
    node container stopped at once, SIGKILL): seconds until another controller holds the VIP
    and until a token request through it succeeds; then `server power on` of the lost
    controller until its services are healthy again."""
    import yaml

    from undercloud.config import Home

    instance = Home(Path(home)).instance
    with open(os.path.join(home, "overcloud", "overcloud", "clouds.yaml")) as f:
        entry = yaml.safe_load(f)["clouds"]["overcloud"]
    auth, cacert = entry["auth"], entry.get("cacert")
    vip = json.loads(cli(home, "stack", "output", "show", "overcloud", "VirtualIP", "-f", "json")[1].stdout)[
        "output_value"]

    def holders() -> list[str]:
        held = []
        for node in (f"overcloud-controller-{i}" for i in range(3)):
            pid = podman("inspect", "--format", "{{.State.Pid}}", f"{instance}-{node}")
            addrs = subprocess.run(["nsenter", "-t", pid, "-n", "ip", "-o", "-4", "addr", "show"],
                                   capture_output=True, text=True).stdout if pid not in ("", "0") else ""
            if f" {vip}/" in addrs:
                held.append(node)
        return held

    (lost,) = holders()
    prefix = f"{instance}-{lost}"
    joined = podman("ps", "-aq", "--filter", f"label=undercloud.node={prefix}").split()
    assert token(auth, cacert), "no token before the loss"
    start = time.monotonic()
    podman("stop", "-t", "0", *joined)
    podman("stop", "-t", "0", prefix)
    moved = served = None
    while time.monotonic() - start < 120 and served is None:
        if moved is None and [n for n in holders() if n != lost]:
            moved = time.monotonic() - start
        if moved is not None and token(auth, cacert):
            served = time.monotonic() - start
        time.sleep(0.2)
    back = time.monotonic()
    cli(home, "server", "power", "on", lost)
    while time.monotonic() - back < 600:
        rows = json.loads(cli(home, "overcloud", "status", "-f", "json")[1].stdout)
        if all(r["health"] == "healthy" for r in rows if r["node"] == lost):
            break
        time.sleep(2)
    return [(f"VIP holder {lost} lost as a whole: VIP on another controller", moved or float("nan"), None),
            ("  first token through the VIP after the loss", served or float("nan"), "failover"),
            (f"  {lost} powered on: its services healthy again", time.monotonic() - back, None)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["minimal", "ha"])
    ap.add_argument("--computes", default="1,2,3", help="ComputeCount values for minimal (default 1,2,3)")
    ap.add_argument("--hypervisor", choices=["container", "vm"], default="container")
    ap.add_argument("--deploy-only", action="store_true",
                    help="only each deploy (time, CPU seconds, CPU per container), then delete: no day 2, no boots")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("deploy_bench needs root (image builds, container nodes)")
    runs = []
    if args.only in (None, "minimal"):
        runs += [("minimal", int(c)) for c in args.computes.split(",")]
    if args.only in (None, "ha"):
        runs.append(("ha", 1))
    if args.hypervisor == "vm":
        runs = [(ex, 0) for ex in dict.fromkeys(ex for ex, _ in runs)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="uc-deploy-bench-") as tmp:
        warm = os.path.join(tmp, "warm")
        guest = os.path.join(tmp, "guest-tiny.qcow2")
        took = cli(warm, "image", "build", "--all")[0]
        if args.hypervisor == "container":
            took += cli(warm, "image", "build", "guest-tiny")[0]
            cli(warm, "image", "download", "guest-tiny", "-o", guest)
        print(f"warm-up: images built or found in the cache in {took:.1f} s (not counted)")
        cli(warm, "service", "stop")
        for ex, computes in runs:
            home = os.path.join(tmp, f"{ex}-{computes}")
            env = os.path.join(tmp, f"{ex}-{computes}.yaml")
            with open(env, "w") as f:
                f.write(CONTROL_PLANE_ONLY if args.hypervisor == "vm" else f"parameter_defaults: {{ComputeCount: {computes}}}\n")
            label = f"{ex}, {computes} compute ({args.hypervisor})"
            try:
                how = ["--example", ex, "--hypervisor", args.hypervisor, "-e", env]
                procs_before = processes_cpu()
                cpu_before = machine_cpu()
                total, p = cli(home, "deploy", *how)
                cpu_all = machine_cpu() - cpu_before
                cpu_ovc, n, per = containers_cpu(home)
                print(f"{label}: {total:.1f} s, {cpu_all:.1f} CPU-s in all; per container (summed over "
                      f"nodes), {cpu_ovc:.1f} in all:")
                for what, secs in sorted(per.items(), key=lambda kv: -kv[1]):
                    print(f"  {what:<50} {secs:7.1f}")
                print(f"{label}: the busiest processes outside the containers:")
                for what, secs in busiest_outside(procs_before, processes_cpu(), CGROUPS):
                    print(f"  {what:<70} {secs:7.1f}")
                stack = stack_seconds(p.stderr)
                rows.append((f"{label}: deploy (cached images -> healthy)", total, GOALS[ex]))
                # What bounds the deploy on this machine: its CPU seconds over the cores it has.
                cores = os.cpu_count() or 1
                rows.append((f"{label}:   CPU used, all processes ({cpu_all:.0f} CPU-s / {cores} cores)",
                             cpu_all / cores, GOALS[ex]))
                rows.append((f"{label}:   CPU used by its {n} containers ({cpu_ovc:.0f} CPU-s / {cores} cores)",
                             cpu_ovc / cores, GOALS[ex]))
                if stack is not None:
                    rows.append((f"{label}:   of which stack create -> healthy", stack, GOALS[ex]))
                if args.deploy_only:
                    cli(home, "overcloud", "delete", "--yes")
                    continue
                noop, q = cli(home, "deploy", *how)
                assert "no change" in q.stderr, q.stderr[-500:]
                rows.append((f"{label}: no-op re-deploy", noop, GOALS["no-op"]))
                if args.hypervisor == "container":
                    if ex == "ha":
                        rows += [(f"{label}: {what}", secs, GOALS[goal]) for what, secs, goal in rolling(home, tmp)]
                        rows += [(f"{label}: {what}", secs, None) for what, secs, _ in replace_node(home)]
                    rows += [(f"{label}: {what}", secs, GOALS[goal]) for what, secs, goal in day2(home, how)]
                    if ex == "ha":
                        rows += [(f"{label}: {what}", secs, GOALS.get(goal)) for what, secs, goal in failover(home)]
                if computes:
                    active, first_line = boot(home, guest, computes)
                    rows.append((f"{label}: {computes} instance(s) at once -> ACTIVE", active, GOALS["active"]))
                    rows.append((f"{label}: {computes} instance(s) -> first console line", first_line,
                                 GOALS["console"]))
                delete, _ = cli(home, "overcloud", "delete", "--yes")
                rows.append((f"{label}: delete", delete, None))
            finally:
                subprocess.run([sys.executable, "-m", "undercloud", "overcloud", "delete", "--yes"],
                               capture_output=True, env={**os.environ, "UNDERCLOUD_HOME": home})
                subprocess.run([sys.executable, "-m", "undercloud", "service", "stop"], capture_output=True,
                               env={**os.environ, "UNDERCLOUD_HOME": home})
            print(f"done: {label}", flush=True)
    print(f"{'what':<70} {'seconds':>8} {'goal':>6} {'ratio':>6}")
    for what, secs, goal in rows:
        ratio = f"{secs / goal:5.2f}x" if goal else ""
        print(f"{what:<70} {secs:8.1f} {goal or '':>6} {ratio:>6}")


if __name__ == "__main__":
    main()
