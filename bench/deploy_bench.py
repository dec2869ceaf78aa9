"""Deploy benchmark: `minimal` and `ha` on container nodes, from cached images to healthy,
and a no-op re-deploy of each. Prints figures and ratios to the goals (minimal < 60 s,
ha < 120 s, no-op < 10 s); never pass/fail.

Needs root, podman and debootstrap (the first run builds the images; that build is not
timed: a warm-up `undercloud image build` of the node and service images runs first). Each example runs
in its own UNDERCLOUD_HOME and is deleted afterwards (its delete is timed too).

    python3 bench/deploy_bench.py [--only minimal|ha] [--hypervisor container|vm]

With `--hypervisor vm` the nodes are libvirt VMs (TCG where KVM does not work, as here),
each loading its service images from the image store: the same goals, for comparison.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

GOALS = {"minimal": 60.0, "ha": 120.0, "no-op": 10.0}


def cli(home: str, *args: str, timeout: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "undercloud", *args], capture_output=True, text=True,
                       env={**os.environ, "UNDERCLOUD_HOME": home}, timeout=timeout)
    took = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"`undercloud {' '.join(args)}` failed:\n{p.stderr[-3000:]}")
    return took, p


def stack_seconds(stderr: str) -> float | None:
    """The deploy's own figure: from stack create/update to healthy (images excluded)."""
    for line in stderr.splitlines():
        if line.startswith("stack ") and "_COMPLETE in " in line:
            try:
                return float(line.split("_COMPLETE in ", 1)[1].split()[0])
            except ValueError:
                pass
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["minimal", "ha"])
    ap.add_argument("--hypervisor", choices=["container", "vm"], default="container")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("deploy_bench needs root (image builds, container nodes)")
    examples = [args.only] if args.only else ["minimal", "ha"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="uc-deploy-bench-") as tmp:
        warm = os.path.join(tmp, "warm")
        took = 0.0
        node_type = "oci" if args.hypervisor == "container" else "qcow2"
        for name, extra in [("overcloud-full", ["--type", node_type])] + [
                (f"service-{s}", []) for s in ("haproxy", "mariadb", "rabbitmq", "memcached", "keystone", "placement")]:
            took += cli(warm, "image", "build", name, *extra)[0]
        print(f"warm-up: images built or found in the cache in {took:.1f} s (not counted)")
        cli(warm, "service", "stop")
        for ex in examples:
            home = os.path.join(tmp, ex)
            try:
                how = ["--example", ex, "--hypervisor", args.hypervisor]
                total, p = cli(home, "deploy", *how)
                stack = stack_seconds(p.stderr)
                noop, q = cli(home, "deploy", *how)
                assert "no change" in q.stderr, q.stderr[-500:]
                delete, _ = cli(home, "overcloud", "delete", "--yes")
            finally:
                subprocess.run([sys.executable, "-m", "undercloud", "service", "stop"], capture_output=True,
                               env={**os.environ, "UNDERCLOUD_HOME": home})
            label = f"{ex} ({args.hypervisor})"
            rows.append((f"{label}: deploy (cached images -> healthy)", total, GOALS[ex]))
            if stack is not None:
                rows.append((f"{label}:   of which stack create -> healthy", stack, GOALS[ex]))
            rows.append((f"{label}: no-op re-deploy", noop, GOALS["no-op"]))
            rows.append((f"{label}: delete", delete, None))
    print(f"{'what':<56} {'seconds':>8} {'goal':>6} {'ratio':>6}")
    for what, secs, goal in rows:
        ratio = f"{secs / goal:5.2f}x" if goal else ""
        print(f"{what:<56} {secs:8.1f} {goal or '':>6} {ratio:>6}")


if __name__ == "__main__":
    main()
