"""Engine benchmark: create, no-op update, 1-resource update and delete of a stack of
20,000 OS::Heat::Value / TestResource resources spread over 1,000 nested stacks.

Runs the engine in this process on a fresh SQLite store (WAL), as the service does (its
garbage-collector settings too, undercloud/gc_settings.py), or on PostgreSQL (`--db
postgresql`: a throwaway local server; or `--db URL`). `--default-gc` keeps CPython's.
Prints each phase's time, the events it wrote, the process's peak memory, the time spent in
the garbage collector during it (with its full collections) and, untimed, the full
collection made after it: each phase starts from a counted heap, so the collector's work for
what one phase grew is not charged to the next.
Goals from the issue: create < 10 s, 1-resource update < 2 s, < 500 MB (Heat: ~10 min).

    python bench/engine_bench.py [--stacks 1000] [--per-stack 20] [--db sqlite|postgresql|URL]
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
from pathlib import Path

import bench_store
from sqlalchemy import func, select

sys.path.insert(0, str(bench_store.REPO))  # this checkout's code, not the venv's installed copy

from undercloud import gc_settings  # noqa: E402
from undercloud.orchestration.engine import StackService  # noqa: E402
from undercloud.orchestration.limits import BY_NAME, LIMITS  # noqa: E402
from undercloud.orchestration.template import Bundle  # noqa: E402
from undercloud.store import Store  # noqa: E402
from undercloud.store.stacks import StackResource  # noqa: E402


def write_templates(root: Path, stacks: int, per_stack: int) -> Path:
    half = per_stack // 2
    child = ["heat_template_version: 2018-08-31",
             "parameters:",
             "  index: {type: string}",
             "  marker: {type: string, default: ''}",
             "resources:",
             "  m:",
             "    type: OS::Heat::Value",
             "    properties: {value: {get_param: marker}}"]
    for i in range(half - 1):
        child += [f"  v{i}:", "    type: OS::Heat::Value",
                  f"    properties: {{value: {{list_join: ['-', [v, {{get_param: index}}, '{i}']]}}}}"]
    for i in range(per_stack - half):
        dep = f"v{i % max(1, half - 1)}"
        child += [f"  t{i}:", "    type: OS::Heat::TestResource",
                  f"    properties: {{value: {{get_attr: [{dep}, value]}}}}"]
    child += ["outputs:", "  first: {value: {get_attr: [t0, output]}}"]
    (root / "child.yaml").write_text("\n".join(child) + "\n")
    top = ["heat_template_version: 2018-08-31",
           "parameters:",
           "  marker: {type: string, default: a}",
           "resources:"]
    for s in range(stacks):
        extra = ", marker: {get_param: marker}" if s == 0 else ""
        top += [f"  c{s}:", "    type: child.yaml", f"    properties: {{index: {s}{extra}}}"]
    top += ["outputs:", "  first: {value: {get_attr: [c0, first]}}"]
    (root / "top.yaml").write_text("\n".join(top) + "\n")
    return root / "top.yaml"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class GcTime:
    """Time spent in the garbage collector, and its full collections, since the last take()."""

    def __init__(self) -> None:
        self.seconds, self.full, self._start = 0.0, 0, 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.full += info["generation"] == 2

    def take(self) -> tuple[float, int]:
        out = (self.seconds, self.full)
        self.seconds, self.full = 0.0, 0
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stacks", type=int, default=1000)
    ap.add_argument("--per-stack", type=int, default=20)
    ap.add_argument("--db", default="sqlite", help=bench_store.HELP)
    ap.add_argument("--default-gc", action="store_true", help="CPython's garbage-collector settings, not the service's")
    args = ap.parse_args()
    if not args.default_gc:
        gc_settings.apply()  # as the service runs
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as tmp, \
            bench_store.store_url(args.db, Path(tmp)) as url:
        root = Path(tmp)
        top = write_templates(root, args.stacks, args.per_stack)
        store = Store(url, root / "store.key").create_schema()
        print(f"store: {store.display_url}")
        svc = StackService(store)
        svc.keep_last_walk = True  # its events are counted below
        bundle = Bundle.from_paths(str(top)).to_json()
        total = args.stacks * (args.per_stack + 1)
        print(f"stack: {args.stacks} nested stacks x {args.per_stack} resources "
              f"= {total} resources (template resources included)")
        if total > LIMITS.resources:  # this stack is bigger than the default limit on purpose
            print(f"{BY_NAME['resources'].env}: {LIMITS.resources} -> {total} for this run")
            LIMITS.resources = total

        gc_time = GcTime()

        def phase(label: str, fn) -> float:
            gc_time.take()
            t = time.perf_counter()
            s = fn()
            took = time.perf_counter() - t
            in_gc, full = gc_time.take()
            status = svc.show("bench")["stack_status"] if s is not False else "DELETED"
            # the walk's events, and the stack's start event written by the request
            written = svc.last_walk.writer.events_written + 1
            svc.last_walk = None  # as the service: a finished walk is not kept
            # A full collection after the phase, timed on its own: the heap this phase grew is
            # counted now, so the next phase is not charged with it (in the service it falls
            # on whatever comes next).
            t = time.perf_counter()
            gc.collect()
            after = time.perf_counter() - t
            print(f"{label:<27} {took:7.2f} s  events {written:7d}  peak RSS {peak_mb():6.0f} MB  "
                  f"gc {in_gc:5.2f} s ({full} full), then {after:4.2f} s  {status}")
            return took

        phase("create", lambda: svc.create("bench", bundle, {}, wait=True))
        with store.engine.connect() as c:
            n = c.execute(select(func.count()).select_from(StackResource.__table__)).scalar()
        print(f"{'':<27} {n} resource rows")
        phase("no-op update", lambda: svc.update("bench", bundle, {}, wait=True))
        phase("1-resource update", lambda: svc.update("bench", bundle, {"marker": "b"}, wait=True))
        # The same, but with the files edited (a comment): every nested stack is walked.
        edited = dict(bundle, files={k: v + "# edited\n" for k, v in bundle["files"].items()})
        phase("1-res. update, files edited", lambda: svc.update("bench", edited, {"marker": "c"}, wait=True))
        out = svc.show("bench")
        assert out["stack_status"] == "UPDATE_COMPLETE", out["stack_status_reason"]
        phase("delete", lambda: (svc.delete("bench", wait=True), False)[1])
        print(f"goals: create < 10 s, 1-resource update < 2 s, peak < 500 MB; peak RSS {peak_mb():.0f} MB")


if __name__ == "__main__":
    sys.exit(main())
