"""Readiness and liveness probes as Kubernetes runs them: httpGet and tcpSocket from the
agent (which shares the node's network), exec inside the container (podman: `podman exec`;
netns: the libpod exec API; process mode: here)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

from undercloud.agent.pod_spec import PodError


def probe(spec: dict, timeout: float = 2.0, run_exec=None) -> tuple[bool, str]:
    """(passed, what an exec probe printed or why it failed). An exec probe runs through
    `run_exec(argv, timeout) -> (exit code, output)` (inside the container) when given, else
    here; timeoutSeconds wins over `timeout`."""
    timeout = float(spec.get("timeoutSeconds") or timeout)
    try:
        if "exec" in spec:
            argv = [str(a) for a in spec["exec"]["command"]]
            if run_exec is not None:
                code, out = run_exec(argv, timeout)
            else:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
                code, out = p.returncode, p.stdout + p.stderr
            return code == 0, out.strip()
        if "httpGet" in spec:
            h = spec["httpGet"]
            url = f"http://{h.get('host', '127.0.0.1')}:{h['port']}{h.get('path', '/')}"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return 200 <= r.status < 400, ""
        if "tcpSocket" in spec:
            t = spec["tcpSocket"]
            with socket.create_connection((t.get("host", "127.0.0.1"), int(t["port"])), timeout=timeout):
                return True, ""
    except (OSError, subprocess.SubprocessError, KeyError, ValueError, PodError) as exc:
        return False, f"{type(exc).__name__}: {exc}" if "exec" in spec else ""
    return True, ""


DEAD_EVERY = 2.0  # seconds between looks for a container that keeps exiting, while waiting


EXEC_SPACING_MAX = 8.0  # seconds between tries of a failing exec readiness probe, at most


def wait_ready(pod: dict, timeout: float, dead=lambda: None, run_exec=None) -> tuple[str, dict, str] | None:
    """None when every readiness probe passes within `timeout`, else (container, probe,
    why) of the first that did not. `dead()` names a container that keeps exiting, which
    ends the wait early (a broken configuration fails in seconds, not at the timeout).
    `run_exec(container)` gives the runner of that container's exec probes (None: here).
    A probe runs every periodSeconds when it says, else every 0.5 s. An exec probe without
    periodSeconds runs after 2 s, then 1.5 times as long after each failure, up to 8 s: each
    try is a process in the container (through the podman API, a conmon that lingers 5 min),
    and one that keeps failing mostly waits for another service (nova-conductor, on every
    node, for the bootstrap node's database sync)."""
    pending = {c["name"]: c["readinessProbe"] for c in pod["spec"]["containers"] if c.get("readinessProbe")}
    said: dict[str, str] = {}
    due = dict.fromkeys(pending, 0.0)
    next_dead = 0.0
    spacing = {n: float(spec.get("periodSeconds") or (2.0 if "exec" in spec else 0.5)) for n, spec in pending.items()}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for n, spec in list(pending.items()):
            if time.monotonic() < due[n]:
                continue
            ok, said[n] = probe(spec, run_exec=run_exec(n) if run_exec else None)
            due[n] = time.monotonic() + spacing[n]
            if "exec" in spec and not spec.get("periodSeconds"):
                spacing[n] = min(spacing[n] * 1.5, EXEC_SPACING_MAX)
            if ok:
                pending.pop(n)
        if pending and time.monotonic() >= next_dead:
            # Each look inspects every container of the Pod through the podman API, which the
            # agents of all container nodes share: every DEAD_EVERY seconds is soon enough (a
            # container that keeps exiting is restarted with a back-off anyway).
            next_dead = time.monotonic() + DEAD_EVERY
            gone = dead()
            if gone:
                first = gone[0] if gone[0] in pending else sorted(pending)[0]
                return first, pending[first], f"did not pass: {gone[1]}" + last_words(said.get(first))
        if pending:
            time.sleep(0.25 if min(due[n] for n in pending) - time.monotonic() < 0.5 else 0.5)
    if not pending:
        return None
    first = sorted(pending)[0]
    return first, pending[first], f"did not pass within {timeout:g} s" + last_words(said.get(first))


def last_words(text: str | None) -> str:
    """An exec probe's last words for the failure reason (its last line, trimmed)."""
    lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
    return f"; it said: {lines[-1][:200]}" if lines else ""
