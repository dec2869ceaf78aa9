"""Benchmark: TripleO's own templates (../shared/corpus/tripleo-heat-templates-victoria, the
overcloud with four environments): validate and preview here, and with --heat the same by
real Heat in the same run (../shared/tools/heat_tht.py in the oracle's venv), with ratios.

    python bench/tht_bench.py [--runs 3] [--heat ~/.cache/heat-oracle/bin/python]
                              [--commands 5 [--baseline HEAD]] [--no-create]

Prints the best of --runs for each phase and the peak memory of this process (validate and
preview run in it; Heat's figure is its own process's). Then one stack create and delete of
that overcloud with the deployed servers' ctlplane addresses of tests/data/tht-portmap.yaml, on
a store in a temporary home (real Heat 27 cannot create it: its yaql lacks `format`).

--commands N times what a user waits for: the commands `undercloud template validate` and
`undercloud stack preview` (a new process each: imports included; both run in the CLI
process, no service), N runs each after a warm-up, their median and peak memory, beside the
same commands of a baseline run interleaved with them (this checkout with
undercloud/orchestration/template/ as git commit --baseline has it; nothing in git changes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_store import baseline_tree

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


def run_command(root: Path, args: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak MB of `python -m undercloud ARGS` with the package under root."""
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up writes .pyc files, as an installed package has
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "undercloud", *args], env=env,
                             stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)  # this child's own CPU time and peak memory
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            err.seek(0)
            raise SystemExit(f"{' '.join(args[:2])} under {root} failed: {err.read().decode().strip()[-300:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def commands(runs: int, ref: str) -> None:
    tail = ["-t", "overcloud.yaml"] + [x for e in ENVS for x in ("-e", e)]
    cmds = {"validate": ["template", "validate", *tail], "preview": ["stack", "preview", *tail]}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": ROOT, "baseline": baseline_tree(ref, Path(tmp))}
        for name, args in cmds.items():
            runs_of: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
            for root in trees.values():  # warm-up: .pyc files, page cache
                run_command(root, args)
            for _ in range(runs):  # interleaved: both see the same load of the machine
                for t, root in trees.items():
                    runs_of[t].append(run_command(root, args))
            fig = {t: [statistics.median(r[i] for r in rs) for i in range(2)] + [max(r[2] for r in rs)]
                   for t, rs in runs_of.items()}
            goal = "; goal 0.5 s" if name == "validate" else ""
            print(f"command {name} (median of {runs}{goal}): {fig['this'][0]:.2f} s, cpu {fig['this'][1]:.2f} s, "
                  f"peak {fig['this'][2]:.0f} MB; baseline ({ref}): {fig['baseline'][0]:.2f} s, "
                  f"cpu {fig['baseline'][1]:.2f} s, peak {fig['baseline'][2]:.0f} MB; ratio "
                  f"{fig['this'][0] / fig['baseline'][0]:.2f} (cpu {fig['this'][1] / fig['baseline'][1]:.2f})")


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
    ap.add_argument("--commands", type=int, default=0, metavar="N",
                    help="time the validate and preview commands N times each beside --baseline")
    ap.add_argument("--baseline", default="HEAD", help="git commit of orchestration/template/ to compare with")
    ap.add_argument("--no-create", action="store_true", help="skip the stack create and delete")
    args = ap.parse_args()
    os.chdir(CORPUS / TREE)
    if args.commands:
        commands(args.commands, args.baseline)
    validate_s, tmpl = best(lambda: load(Bundle.from_paths("overcloud.yaml", env_paths=ENVS)), args.runs)
    preview_s, rows = best(lambda: preview(tmpl), args.runs)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"undercloud: validate {validate_s:.2f} s (goal 0.5), preview {preview_s:.2f} s (goal 0.3), "
          f"{len(rows)} resources in the tree, peak {rss_mb:.0f} MB")
    if args.no_create:
        return
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
