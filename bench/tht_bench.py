"""Benchmark: TripleO's own templates (../shared/corpus/tripleo-heat-templates-victoria, the
overcloud with four environments): validate and preview here, and with --heat the same by
real Heat in the same run (../shared/tools/heat_tht.py in the oracle's venv), with ratios.

    python bench/tht_bench.py [--runs 3] [--heat ~/.cache/heat-oracle/bin/python]

Prints the best of --runs for each phase and the peak memory of this process (validate and
preview run in it; Heat's figure is its own process's). Then one stack create and delete of
that overcloud with the deployed servers' ctlplane addresses of tests/data/tht-portmap.yaml, on
a store in a temporary home (real Heat 27 cannot create it: its yaql lacks `format`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from undercloud.api.context import Context  # noqa: E402
from undercloud.config import Home  # noqa: E402
from undercloud.orchestration.template import Bundle, load  # noqa: E402
from undercloud.orchestration.template.preview import preview  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
TREE = "tripleo-heat-templates-victoria"
PORTMAP = ROOT / "tests" / "data" / "tht-portmap.yaml"
ENVS = ["overcloud-resource-registry-puppet.yaml", "environments/deployed-server-environment.yaml",
        "environments/deployed-server-noop-ctlplane.yaml", "fill-env.yaml"]


def best(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def create_and_delete() -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory() as home:
        ctx = Context(Home(Path(home)))
        t = time.perf_counter()
        bundle = Bundle.from_paths("overcloud.yaml", env_paths=ENVS + [str(PORTMAP)])
        ctx.stacks.create("overcloud", bundle.to_json(), {}, wait=True)
        create_s = time.perf_counter() - t
        status = ctx.stacks.show("overcloud")["stack_status"]
        t = time.perf_counter()
        ctx.stacks.delete("overcloud", wait=True)
        delete_s = time.perf_counter() - t
        ctx.store.engine.dispose()
    return create_s, delete_s, status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--heat", help="python of a venv with openstack-heat: compare with real Heat")
    args = ap.parse_args()
    os.chdir(CORPUS / TREE)
    validate_s, tmpl = best(lambda: load(Bundle.from_paths("overcloud.yaml", env_paths=ENVS)), args.runs)
    preview_s, rows = best(lambda: preview(tmpl), args.runs)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"undercloud: validate {validate_s:.2f} s (goal 0.5), preview {preview_s:.2f} s (goal 0.3), "
          f"{len(rows)} resources in the tree, peak {rss_mb:.0f} MB")
    create_s, delete_s, status = create_and_delete()
    print(f"undercloud: stack create {create_s:.2f} s ({status}), delete {delete_s:.2f} s (goal 15 s for both), "
          f"peak {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.heat:
        cmd = [args.heat, str(CORPUS.parent / "tools" / "heat_tht.py"), TREE, "-t", "overcloud.yaml", "--preview"]
        for e in ENVS:
            cmd += ["-e", e]
        r = subprocess.run(cmd, cwd=CORPUS, capture_output=True, text=True, timeout=600)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            print(f"heat: no figures: {r.stderr.strip()[-300:]}")
            return
        heat = json.loads(line)
        print(f"heat:       validate {heat['validate_s']:.2f} s, preview {heat['preview_s']:.2f} s, "
              f"peak {heat['rss_mb']} MB")
        print(f"ratios (heat / undercloud): validate {heat['validate_s'] / validate_s:.1f}x, "
              f"preview {heat['preview_s'] / max(preview_s, 1e-6):.1f}x, memory {heat['rss_mb'] / rss_mb:.1f}x")


if __name__ == "__main__":
    main()
