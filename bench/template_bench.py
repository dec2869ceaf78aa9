"""Benchmark: load, validate and resolve a generated tree of 1,000 nested template resources
holding 20,000 resources in total. Prints times per phase and peak memory.

    python bench/template_bench.py [--mids 10] [--leaves 99] [--per-template 19]
                                   [--baseline REF [--runs 5]]

`--baseline REF` times the same tree with undercloud/orchestration/template/ as git commit
REF has it, interleaved with this checkout (each run a new process), and prints the medians
and their ratio: machines (and one machine from minute to minute) differ, a ratio measured in
the same run does not.

Tree: the top template holds `mids` template resources; each mid template holds `leaves`
template resources and `per-template` Value resources; each leaf template holds
`per-template` Value resources. Every file is distinct (as in a real overcloud, where each
nested stack has its own template). Values use get_param, str_replace, list_join, repeat,
get_attr between siblings (chains of dependencies) and outputs read by the parent.
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

from bench_store import REPO, baseline_tree

# the package timed: this checkout's, or a baseline copy's (--baseline runs this file under it)
sys.path.insert(0, os.environ.get("UNDERCLOUD_BENCH_ROOT", str(REPO)))

from undercloud.orchestration.limits import BY_NAME, LIMITS  # noqa: E402
from undercloud.orchestration.template import Bundle, load, select_path  # noqa: E402


def values_block(n: int) -> str:
    out = []
    for i in range(n):
        if i == 0:
            value = "{str_replace: {template: 'node-$i-$n', params: {$i: {get_param: index}, $n: {get_param: name}}}}"
        elif i % 3 == 1:
            value = f"{{list_join: ['-', [{{get_attr: [v{i - 1}, value]}}, '{i}']]}}"
        elif i % 3 == 2:
            value = "{repeat: {template: 'x-%v%', for_each: {'%v%': {get_param: items}}}}"
        else:
            value = f"{{map_merge: [{{a: {{get_param: index}}}}, {{b: {{get_attr: [v{i - 2}, value]}}}}]}}"
        out.append(f"  v{i}:\n    type: OS::Heat::Value\n    properties:\n      value: {value}\n")
    return "".join(out)


PARAMS = """parameters:
  index: {type: string, default: '0'}
  name: {type: string, default: top}
  items: {type: comma_delimited_list, default: 'a,b,c'}
"""


def generate(root: Path, mids: int, leaves: int, per: int) -> Path:
    (root / "mid").mkdir(parents=True)
    (root / "leaf").mkdir()
    top = ["heat_template_version: 2021-04-16\n", PARAMS, "resources:\n"]
    for m in range(mids):
        top.append(f"  mid{m}:\n    type: mid/mid{m}.yaml\n    properties:\n      index: '{m}'\n"
                   f"      name: {{get_param: name}}\n")
        mid = ["heat_template_version: 2021-04-16\n", PARAMS, "resources:\n", values_block(per)]
        for j in range(leaves):
            mid.append(f"  leaf{j}:\n    type: ../leaf/leaf{m}_{j}.yaml\n    properties:\n"
                       f"      index: '{j}'\n      name: {{get_attr: [v0, value]}}\n")
            leaf = ["heat_template_version: 2021-04-16\n", PARAMS, "resources:\n", values_block(per),
                    f"outputs:\n  last: {{value: {{get_attr: [v{per - 1}, value]}}}}\n"]
            (root / "leaf" / f"leaf{m}_{j}.yaml").write_text("".join(leaf))
        mid.append("outputs:\n  leaves: {value: {list_join: [',', [" +
                   ", ".join(f"{{get_attr: [leaf{j}, last, b]}}" for j in range(min(leaves, 5))) + "]]}}\n")
        (root / "mid" / f"mid{m}.yaml").write_text("".join(mid))
    top.append("outputs:\n  first_mid_leaves: {value: {get_attr: [mid0, leaves]}}\n")
    (root / "top.yaml").write_text("".join(top))
    return root / "top.yaml"


class Values:
    """A resolver over values computed so far (what the engine's store would give)."""

    def __init__(self) -> None:
        self.attrs: dict[str, dict] = {}

    def get_resource(self, name: str) -> str:
        return f"id-{name}"

    def get_attr(self, name: str, attr: str | None, path: list) -> object:
        attrs = self.attrs.get(name, {})
        return attrs if attr is None else select_path(attrs.get(attr), path)


def walk(tmpl) -> tuple[int, dict]:
    """Resolve every resource in dependency order, descending into nested stacks."""
    r = Values()
    deps = tmpl.dependencies()
    done: set[str] = set()
    count = 0
    while len(done) < len(deps):
        ready = [n for n in deps if n not in done and deps[n] <= done]
        for n in ready:
            rd = tmpl.resources[n]
            props = tmpl.resolve(rd.properties, r) or {}
            count += 1
            if rd.template_file:
                child = tmpl.nested(n, props)
                c, outs = walk(child)
                count += c
                r.attrs[n] = outs
            else:
                r.attrs[n] = {"value": props.get("value")}
            done.add(n)
    outs = {k: tmpl.resolve(o.value, r) for k, o in tmpl.outputs.items()}
    return count, outs


PHASES = ("read + parse YAML", "load + validate", "resolve whole tree")


def service_gc() -> None:
    """The garbage collector as the service sets it (a baseline commit before gc_settings: as it was)."""
    try:
        from undercloud import gc_settings
    except ImportError:
        return
    gc_settings.apply()


def measure(mids: int, leaves: int, per: int) -> dict:
    service_gc()
    total = mids * (1 + per + leaves * (1 + per))
    if total > LIMITS.resources:  # this tree is bigger than the default limit on purpose
        print(f"{BY_NAME['resources'].env}: {LIMITS.resources} -> {total} for this run", file=sys.stderr)
        LIMITS.resources = total
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        top = generate(Path(d), mids, leaves, per)
        t1 = time.perf_counter()
        c1 = time.process_time()
        bundle = Bundle.from_paths(str(top))
        t2 = time.perf_counter()
        tmpl = load(bundle, {"name": "bench"})
        t3 = time.perf_counter()
        count, outs = walk(tmpl)
        t4 = time.perf_counter()
        cpu = time.process_time() - c1
    sample = next(iter(outs.values()), None) if outs else None
    return {"generate": t1 - t0, "phases": [t2 - t1, t3 - t2, t4 - t3], "total": t4 - t1, "cpu": cpu,
            "resources": count, "nested": mids + mids * leaves, "files": len(bundle.files),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "outputs": len(outs), "sample": str(sample)[:60]}


def report(m: dict) -> None:
    print(f"tree: {m['nested']} nested template resources, {m['resources']} resources in total, "
          f"{m['files']} files")
    print(f"generate files      {m['generate']:7.2f} s (not counted)")
    for name, t in zip(PHASES, m["phases"]):
        print(f"{name:<19} {t:7.2f} s")
    print(f"total               {m['total']:7.2f} s   (goal < 5 s: {m['total'] / 5:.2f} of the budget; "
          f"CPU {m['cpu']:.2f} s, wall time varies with the machine's load)")
    print(f"peak memory (RSS)   {m['peak_mb']:7.0f} MB  (goal < 500 MB: {m['peak_mb'] / 500:.2f} of the budget)")
    print(f"check: top outputs {m['outputs']}, sample {m['sample']!r}")


def beside_baseline(a: argparse.Namespace) -> None:
    """This checkout and the baseline, `runs` times each, interleaved; medians and their ratio."""
    args = [sys.executable, __file__, "--json", "--mids", str(a.mids), "--leaves", str(a.leaves),
            "--per-template", str(a.per_template)]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            base = baseline_tree(a.baseline, Path(tmp))
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"--baseline {a.baseline}: {(exc.stderr or b'').decode().strip() or exc}") from None
        roots = {"this": REPO, f"baseline {a.baseline}": base}
        runs: dict[str, list[dict]] = {name: [] for name in roots}
        for i in range(a.runs + 1):  # the first: a warm-up (.pyc files of modules imported lazily)
            for name, root in roots.items():
                env = dict(os.environ, UNDERCLOUD_BENCH_ROOT=str(root))
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                run = subprocess.run(args, env=env, capture_output=True, text=True)
                if run.returncode:
                    last = (run.stderr.strip().splitlines() or ["no output"])[-1]
                    raise SystemExit(f"the {name} run failed: {last}")
                if i:
                    runs[name].append(json.loads(run.stdout))
    med = {name: [statistics.median(r["phases"][i] for r in rs) for i in range(len(PHASES))]
           + [statistics.median(r["total"] for r in rs), min(r["total"] for r in rs)]
           for name, rs in runs.items()}
    print(f"median of {a.runs} runs each, interleaved (s):")
    print(f"{'':22}" + "".join(f"{p:>20}" for p in PHASES + ("total", "best total")))
    for name, fig in med.items():
        print(f"{name:22}" + "".join(f"{x:20.2f}" for x in fig))
    this, base = med.values()
    print(f"ratio this / baseline: total {this[3] / base[3]:.2f}, "
          + ", ".join(f"{p} {this[i] / base[i]:.2f}" for i, p in enumerate(PHASES)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mids", type=int, default=10)
    ap.add_argument("--leaves", type=int, default=99)
    ap.add_argument("--per-template", type=int, default=19)
    ap.add_argument("--baseline", metavar="REF", help="git commit of orchestration/template/ to time beside")
    ap.add_argument("--runs", type=int, default=5, help="runs of each with --baseline (default 5)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    if a.baseline:
        beside_baseline(a)
        return
    m = measure(a.mids, a.leaves, a.per_template)
    if a.json:
        print(json.dumps(m))
    else:
        report(m)


if __name__ == "__main__":
    main()
