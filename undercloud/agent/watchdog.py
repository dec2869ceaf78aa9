"""The agent's watchdog: keeps the Pods this node played running and healthy between
deployments, without the undercloud. podman's restart policy covers a process that exits;
nothing else covered a container stopped by hand (`podman stop`, `podman kill`) or a hung
one, and podman's own health-check timers need systemd, which these nodes do not run.

Every `watch_interval` seconds (agent setting; 0 turns it off), for each Pod the kube hook
played and found ready (kube/<pod>.sha256 and kube/<pod>.json):
- a container seen not running in two rounds in a row is started (one round is left to the
  restart policy, which brings an exited process back within a second);
- a container whose liveness check (`pod_spec.liveness_probe`) fails `failureThreshold` times
  in a row (3; each given timeoutSeconds, else 5 s, where a readiness check has 2: a
  service answering slowly on a saturated node is busy, not hung) is killed and started
  again. Failures count once the check passed since the
  container's start (checked every round until then; a pass seen before the listing showed
  the start counts when it came a whole second after it), or `initialDelaySeconds` (120)
  after it: a slow start is not a hang.
Never while the hook plays that Pod (`kube.pod_lock`). A container that is missing is left
to the next deploy (a Pod no longer wanted may have been removed on purpose). A file
`kube/watchdog.pause` in the agent's state directory pauses it: maintenance, when a
stopped service must stay stopped.

What it sees goes to kube/health.json and to the undercloud (`PUT .../health`, on change
and every REPORT_EVERY seconds): per Pod its config hash, per container its state, image,
restarts (its own, and podman's: a container whose start time changed without it acting)
and the last restart with its reason.

Asked for a fresh report (`undercloud overcloud status`: the undercloud puts a request,
`health_request`, in this server's document, which the agent's poll fetches into
metadata.json), it lists the containers again, runs every running container's readiness
probe now (`ready`: "healthy" or "failing (why)"), and reports at once with `answers` = that
request, paused or not: a pause stops repairs, not reports. The undercloud shows a node
whose report does not answer its request as unknown, never an older result as now.
"""

from __future__ import annotations

import json
import subprocess
import time

from undercloud.agent import engine, files, kube, pod_spec, probes
from undercloud.agent.pod_spec import PodError

FAILURE_THRESHOLD = 3  # Kubernetes' default failureThreshold
INITIAL_DELAY = 120.0  # seconds a started container has to pass its check once
PERIOD = 3.0  # seconds between checks of one container, unless its probe says periodSeconds
REPORT_EVERY = 60.0
LIVENESS_TIMEOUT = 5.0  # seconds, unless the probe says timeoutSeconds: a busy service is not a hung one
MAX_SPACING = 15.0  # seconds: checks never spaced wider, however much the passing ones cost
LIST_SHARE = 20  # list the containers again after 20 times what a listing cost: <= 5 % of the time
READY_TIMEOUT = 5.0  # seconds a readiness probe run on request waits, unless it says timeoutSeconds: busy is not down
ASK_LOOK = 0.25  # seconds between looks for a request for a fresh report while the watchdog waits
HEALTH_REQUEST = "health_request"  # the key of the request in the undercloud's document


def _now_text() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _lists(mode: str) -> bool:
    """Whether the engine of a played Pod's mode lists its containers (process mode does not:
    its supervisor restarts what exits)."""
    return mode in kube.ENGINES and kube.engine_for(mode).lists_containers


class Watchdog:
    def __init__(self, log, report=None):
        self.log = log
        self.report = report  # body -> None; raises OSError-like on failure
        self.track: dict[tuple[str, str], dict] = {}
        self.file = engine.state_dir() / "health.json"
        try:
            self.health = json.loads(self.file.read_text())
        except (OSError, ValueError):
            self.health = {}
        self.sent: str | None = None
        self.sent_at = 0.0
        self.listings: dict[str, tuple[float, dict]] = {}  # mode -> (when, the node's containers)
        self.list_cost: dict[str, float] = {}  # mode -> seconds the last listing took
        self.probe_cost = 0.0  # seconds the passing checks of the last round that ran some took
        self.played_last: set = set()
        self.probing = 0.0
        self.answered = self.health.get("answers")  # the last request for a report answered
        self.doc_seen: tuple | None = None  # metadata.json's (inode, mtime, size) when last read
        self.asked: float | None = None  # the request in it
        self.tried: float | None = None  # the last request a round ran for (answered or not)

    def request(self) -> float | None:
        """A request for a fresh report not answered yet (the runner's copy of the
        undercloud's document, read again only when it changed), else None."""
        path = engine.state_dir().parent / "metadata.json"
        try:
            st = path.stat()
        except OSError:
            return None
        if (st.st_ino, st.st_mtime_ns, st.st_size) != self.doc_seen:  # the runner replaces it: a new inode
            self.doc_seen = (st.st_ino, st.st_mtime_ns, st.st_size)
            try:
                asked = json.loads(path.read_text()).get(HEALTH_REQUEST)
            except (OSError, ValueError, AttributeError):
                asked = None
            self.asked = float(asked) if isinstance(asked, (int, float)) and not isinstance(asked, bool) else None
        return self.asked if self.asked is not None and self.asked != self.answered else None

    @staticmethod
    def played() -> list[tuple[str, str, str, dict]]:
        """(pod, mode, config hash, Pod) of every Pod the hook played and found ready."""
        out = []
        base = engine.state_dir()
        for h in sorted(base.glob("*.sha256")):
            try:
                mode, _, digest = h.read_text().partition(":")
                pod = json.loads((base / f"{h.stem}.json").read_text())
            except (OSError, ValueError):
                continue
            if isinstance(pod, dict) and (pod.get("metadata") or {}).get("name") == h.stem:
                out.append((h.stem, mode, digest, pod))
        return out

    def paused(self) -> bool:
        return (engine.state_dir() / "watchdog.pause").exists()

    def round(self) -> list[str]:
        """One look at every played Pod; returns what it repaired."""
        did: list[str] = []
        request = self.tried = self.request()
        if request is not None:
            self.listings.clear()  # asked how things are now: list now
        pods = self.played()
        played = {(name, digest) for name, _m, digest, _p in pods}
        if played != self.played_last:  # a Pod played or replaced since: list again now
            self.listings.clear()
            self.played_last = played
        listing: dict[str, dict] = {}
        fresh: set[str] = set()
        for mode in sorted({m for _, m, _, _ in pods if _lists(m)}):
            found, new = self._listing(mode)
            if found is not None:
                listing[mode] = found
                if new:
                    fresh.add(mode)
        self.probing = 0.0
        if not self.paused():
            for name, mode, _digest, pod in pods:
                if mode not in listing:
                    continue  # process mode: its supervisor restarts what exits
                with kube.pod_lock(name, wait=False) as mine:
                    if mine:
                        did += self._look(name, mode, pod, listing[mode], mode in fresh)
        if self.probing:
            self.probe_cost = self.probing
        ready = self._readiness(pods, listing) if request is not None else None
        self._record(pods, listing, ready, request)
        return did

    def _readiness(self, pods: list, listing: dict) -> dict[tuple[str, str], str]:
        """(pod, container) -> "healthy" / "failing (why)": the readiness probe of every
        running container, now, in parallel (a hung service costs its timeout once)."""
        from concurrent.futures import ThreadPoolExecutor

        jobs = []
        for name, mode, _digest, pod in pods:
            for c in pod["spec"]["containers"]:
                spec = c.get("readinessProbe")
                if not spec:
                    continue
                if _lists(mode):
                    info = (listing.get(mode) or {}).get((name, c["name"]))
                    if info is None or info["state"] != "running":
                        continue  # its state says it
                    run_exec = kube.engine_for(mode).exec_runner(name, c["name"])
                else:
                    run_exec = None  # process mode: the probe runs here
                jobs.append(((name, c["name"]), spec, run_exec))
        if not jobs:
            return {}
        with ThreadPoolExecutor(min(8, len(jobs))) as pool:
            results = list(pool.map(lambda job: readiness(job[1], job[2]), jobs))
        return {key: result for (key, _s, _r), result in zip(jobs, results)}

    def _listing(self, mode: str) -> tuple[dict | None, bool]:
        """(the node's containers, listed just now?). Listed again only LIST_SHARE times
        what the last listing cost after it: through the libpod API (container nodes) a
        listing costs milliseconds and happens every round; a `podman ps` on an emulated VM
        costs a second or two, and then at most 1/LIST_SHARE of the time goes to it."""
        when, found = self.listings.get(mode, (None, None))
        if when is not None and time.monotonic() - when < LIST_SHARE * self.list_cost.get(mode, 0.0):
            return found, False
        start = time.monotonic()
        try:
            found = kube.engine_for(mode).containers()
        except (OSError, ValueError, PodError, subprocess.SubprocessError) as exc:
            self.log(f"watchdog: cannot list the containers ({mode}): {exc}")
            return None, False
        self.list_cost[mode] = time.monotonic() - start
        self.listings[mode] = (time.monotonic(), found)
        return found, True

    def _look(self, name: str, mode: str, pod: dict, found: dict, fresh: bool = True) -> list[str]:
        did = []
        for c in pod["spec"]["containers"]:
            info = found.get((name, c["name"]))
            if info is None:
                continue
            t = self.track.setdefault((name, c["name"]), {"started": None})
            if info["started_at"] != t["started"]:  # (re)started since the last look
                if t["started"] is not None and t.get("id") == info["id"]:
                    # Not by us (a repair forgets the container's track): podman's restart policy.
                    rec = self._container_record(name, c["name"])
                    rec["policy_restarts"] = int(rec.get("policy_restarts") or 0) + 1
                    rec["last_restart"] = {"at": _now_text(), "why": "its process exited; restarted by podman"}
                # A pass the watchdog saw after the start (a listing lags; StartedAt is in whole
                # seconds) is a pass since it: a hang right after a quick restart is not a slow start.
                passed = 0 < info["started_at"] <= t.get("last_pass", 0.0) - 1
                t.update(started=info["started_at"], id=info["id"], since=time.monotonic(), fails=0, passed=passed,
                         down=0, due=0.0)
            if info["state"] != "running":
                if not fresh:
                    continue  # only a listing made now may say a container is down
                t["down"] += 1
                if t["down"] >= 2:
                    did += self._repair(name, mode, c["name"], info, f"was {info['state']}", restart=False)
                continue
            t["down"] = 0
            spec = pod_spec.liveness_probe(c)
            if not spec or time.monotonic() < t["due"]:
                continue
            run_exec = kube.engine_for(mode).exec_runner(name, c["name"])
            started = time.monotonic()
            ok, said = probes.probe(spec, timeout=LIVENESS_TIMEOUT, run_exec=run_exec)
            # Checks cost the service a request each: on an emulated VM a WSGI app's answer
            # takes a fair share of a CPU. They come again after the period, or LIST_SHARE
            # times what all the passing checks of the last round cost if that is longer, but
            # at most MAX_SPACING apart: a hang is found within threshold spacings. Failures
            # are spaced alike: a service saturated for a while (keystone while a deploy
            # starts twenty services) answers late, and must not be restarted for it.
            # Until its first pass since a start, every round: a hang soon after a restart
            # counts only from a pass the watchdog saw (else after the initial delay).
            if ok or t["passed"]:
                t["due"] = time.monotonic() + max(float(spec.get("periodSeconds") or PERIOD),
                                                  min(LIST_SHARE * self.probe_cost, MAX_SPACING))
            if ok:
                self.probing += time.monotonic() - started
                t.update(passed=True, fails=0, last_pass=time.time())
                continue
            if not t["passed"] and time.monotonic() - t["since"] < float(spec.get("initialDelaySeconds")
                                                                          or INITIAL_DELAY):
                continue
            t["fails"] += 1
            threshold = int(spec.get("failureThreshold") or FAILURE_THRESHOLD)
            if t["fails"] >= threshold:
                why = f"health check ({pod_spec.probe_text(spec)}) failed {t['fails']} times in a row"
                did += self._repair(name, mode, c["name"], info, why + probes.last_words(said), restart=True)
        return did

    def _repair(self, name: str, mode: str, container: str, info: dict, why: str, restart: bool) -> list[str]:
        verb = "restarted" if restart else "started"
        try:
            kube.engine_for(mode).start(info["name"], restart=restart)
        except (OSError, PodError, subprocess.SubprocessError) as exc:
            self.log(f"watchdog: pod {name}: container {container} {why}; could not be {verb}: {exc}")
            return []
        self.track.pop((name, container), None)
        self.listings.pop(mode, None)  # what it listed is stale now: list again next round
        rec = self._container_record(name, container)
        rec["agent_restarts"] = int(rec.get("agent_restarts") or 0) + 1
        rec["last_restart"] = {"at": _now_text(), "why": f"{why}; {verb}"}
        line = f"pod {name}: container {container} {why}: {verb}"
        self.log(f"watchdog: {line}")
        return [line]

    def _container_record(self, pod: str, container: str) -> dict:
        return self.health.setdefault("pods", {}).setdefault(pod, {}).setdefault("containers", {}) \
            .setdefault(container, {})

    def _record(self, pods: list, listing: dict, ready: dict | None = None, request: float | None = None) -> None:
        """health.json, and the report to the undercloud when it changed (or now and then, or
        at once when asked: `ready` holds the readiness probes run for `request`)."""
        kept = self.health.get("pods") or {}
        out = {}
        for name, mode, digest, pod in pods:
            old = kept.get(name) or {}
            if old.get("config") != digest[:12]:
                old = {}  # a new config: its own restart count
            containers = {}
            for c in pod["spec"]["containers"]:
                rec = dict((old.get("containers") or {}).get(c["name"]) or {})
                info = (listing.get(mode) or {}).get((name, c["name"]))
                if mode in listing:
                    rec.update(state=info["state"] if info else "missing",
                               image=info["image"] if info else c.get("image", ""),
                               image_id=info["image_id"] if info else "",
                               restarts=int(rec.get("agent_restarts") or 0) + int(rec.get("policy_restarts") or 0))
                else:
                    rec.update(state="supervised", image=c.get("image", ""))
                if ready is not None:  # kept until the next request: the results as of `answers`
                    rec.pop("ready", None)
                    if (name, c["name"]) in ready:
                        rec["ready"] = ready[(name, c["name"])]
                containers[c["name"]] = rec
            out[name] = {"config": digest[:12], "mode": mode, "containers": containers}
        answers = request if request is not None else self.health.get("answers")
        self.health = {"paused": self.paused(), "pods": out, "answers": answers}
        text = json.dumps(self.health, sort_keys=True)
        files.write_atomic(self.file, text)
        if self.report and (request is not None or text != self.sent or time.monotonic() - self.sent_at > REPORT_EVERY):
            try:
                self.report(self.health)
            except Exception as exc:  # noqa: BLE001 - the transport's errors; reported again next round
                self.log(f"watchdog: health report not acknowledged: {exc}")
                return  # a request stays unanswered: probed and sent again next round
            self.sent, self.sent_at = text, time.monotonic()
        if request is not None:
            self.answered = request


def readiness(spec: dict, run_exec=None) -> str:
    """A readiness probe's result as `overcloud status` shows it."""
    ok, said = probes.probe(spec, timeout=READY_TIMEOUT, run_exec=run_exec)
    if ok:
        return "healthy"
    lines = [x.strip() for x in (said or "").splitlines() if x.strip()]
    return f"failing ({pod_spec.probe_text(spec)} did not pass{': ' + lines[-1][:120] if lines else ''})"


def run(log, interval: float, report=None, stop=None) -> None:
    """The watchdog's loop (a thread of the agent)."""
    dog = Watchdog(log, report)
    while not (stop and stop()):
        try:
            dog.round()
        except Exception as exc:  # noqa: BLE001 - a supervisor must outlive one bad round
            log(f"watchdog: round failed: {type(exc).__name__}: {exc}")
        until = time.monotonic() + interval
        while time.monotonic() < until and not (stop and stop()) and dog.request() in (None, dog.tried):
            time.sleep(max(0.0, min(ASK_LOOK, until - time.monotonic())))  # asked for a report: a round now
