"""Process mode: a node without podman runs each container's command as a process from its
own file system, supervised (restarted on exit, logs under the agent's state directory)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from undercloud.agent import engine, files


def _pids_file(name: str) -> Path:
    return engine.state_dir() / name / "supervisor.pid"


def stop_processes(name: str) -> None:
    f = _pids_file(name)
    try:
        pid = int(f.read_text())
        os.killpg(pid, signal.SIGTERM)
        for _ in range(50):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    f.unlink(missing_ok=True)


def processes_running(name: str) -> bool:
    try:
        os.kill(int(_pids_file(name).read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def start_processes(name: str, pod: dict, spec_file: Path) -> None:
    stop_processes(name)
    work = engine.state_dir() / name
    work.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-m", "undercloud.agent", "supervise", str(spec_file)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=open(work / "supervisor.log", "ab"), start_new_session=True, env=dict(os.environ))
    files.write_atomic(_pids_file(name), str(p.pid))


def supervise(spec_file: Path) -> int:
    """Run the Pod's containers as processes; restart any that exits (1 s back-off)."""
    pod = json.loads(spec_file.read_text())
    name = pod["metadata"]["name"]
    work = engine.state_dir() / name
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if "emptyDir" in v:
            (work / "volumes" / v["name"]).mkdir(parents=True, exist_ok=True)
    procs: dict[str, subprocess.Popen | None] = {}
    containers = pod["spec"]["containers"]

    def start(c: dict) -> subprocess.Popen:
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        env = dict(os.environ, **{e["name"]: str(e.get("value", "")) for e in c.get("env") or []})
        log = open(work / f"{c['name']}.log", "ab")
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=str(work))

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    while not stopping:
        for c in containers:
            p = procs.get(c["name"])
            if p is None or p.poll() is not None:
                try:
                    procs[c["name"]] = start(c)
                except OSError as exc:
                    (work / f"{c['name']}.log").open("a").write(f"cannot start: {exc}\n")
                    procs[c["name"]] = None
        time.sleep(1)
    for p in procs.values():
        if p and p.poll() is None:
            p.terminate()
    return 0


class ProcessEngine(engine.Engine):
    """No podman: a supervisor process per Pod; nothing to list, start or probe inside (the
    supervisor restarts what exits; probes run here)."""

    name = "process"
    lists_containers = False
    loads_images = False

    def create(self, name: str, pod: dict, configmaps: dict, spec_file: Path) -> tuple[str, str]:
        start_processes(name, pod, spec_file)
        return f"pod {name}: started as supervised processes\n", ""

    def running(self, name: str) -> bool:
        return processes_running(name)

    def log_tail(self, pod: str, container: str, lines: int = 20) -> str:
        return "".join((engine.state_dir() / pod / f"{container}.log").read_text(errors="replace")
                       .splitlines(keepends=True)[-lines:])
