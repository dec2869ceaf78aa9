"""The agent's loop: collect -> apply/refresh -> run deployments -> signal.

State on disk (state_dir), so that a restart or a reboot picks up where it stopped:
  metadata.json / metadata.etag   last document from the undercloud (used while it is down)
  merged.json, applied.sha256     merged metadata and the hash last applied successfully
  deployments/<id>.json           journal: running -> signalling (result kept) -> done
A deployment is recorded done only after the undercloud acknowledged its signal; one
found `running` at start (agent killed, node rebooted) is run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import time
from pathlib import Path

from undercloud.agent import apply as oac
from undercloud.agent import files, hooks
from undercloud.agent.logs import Log
from undercloud.agent.refresh import RefreshError, refresh
from undercloud.agent.settings import REASON_CHARS, Settings
from undercloud.agent.transport import Refused, Undercloud, Unreachable

# A long-poll that is not held (an undercloud without it answers at once) or is cut while
# held (a proxy that ends long requests) CUTS_TO_POLL times in a row, while plain polls get
# through: the agent polls every `interval` instead and tries the long-poll again this much later.
CUTS_TO_POLL = 3
LONG_POLL_RETRY = 600.0
TRIM_MARKER = "\n[... undercloud-agent trimmed {n} bytes of this output ...]\n"


def trim(text: str, limit: int) -> str:
    """Keep the head and the tail (where errors are) of an over-long output."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    half = limit // 2
    n = len(data) - 2 * half
    return (data[:half].decode("utf-8", "ignore") + TRIM_MARKER.format(n=n)
            + data[-half:].decode("utf-8", "ignore"))


def _write_json(path: Path, data) -> None:
    files.write_atomic(path, json.dumps(data))


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def kill_orphan(entry: dict) -> None:
    """A hook left running by a killed agent (same boot) is stopped before the re-run."""
    pid = entry.get("pid")
    if not pid or entry.get("boot") != boot_id():
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if os.getpgid(pid) == pid and entry.get("marker", "").encode() in cmdline:
            os.killpg(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def _read_json(path: Path, default=None):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


class Agent:
    def __init__(self, settings: Settings, log: Log | None = None):
        self.s = settings
        self.log = log or Log()
        self.log.secret(settings.token)
        self.uc = Undercloud(settings.url, settings.server_id, settings.token, settings.request_timeout,
                             ca=settings.ca)
        self.state = settings.state_dir
        self.journal = self.state / "deployments"
        self.journal.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state, 0o700)
        # the CA as a file, for the hooks' own calls to the undercloud (UNDERCLOUD_CA_FILE)
        self.ca_file = self.state / "undercloud-ca.pem"
        if settings.ca and (not self.ca_file.exists() or self.ca_file.read_text() != settings.ca):
            files.write_atomic(self.ca_file, settings.ca, 0o644)
        self.failures = 0  # consecutive collect failures, for backoff
        self.cuts = 0  # long-polls in a row not held or cut while held
        self.probe = False  # the last long-poll was cut: this round polls plainly, to tell why
        self.started = False  # the first round (of this process) is a plain poll
        self.plain_until = 0.0  # monotonic: poll plainly until then (the long-poll did not work)
        self.changed = False  # the last collect brought a new document
        self.fetch_took = 0.0  # and how long its request took

    # --- collect ---
    def collect(self, wait: float = 0) -> tuple[dict | None, bool]:
        """(metadata, changed). Falls back to the cached document when unreachable."""
        etag_file, md_file = self.state / "metadata.etag", self.state / "metadata.json"
        cached = _read_json(md_file)
        etag = etag_file.read_text().strip() if etag_file.exists() and cached is not None else None
        t0 = time.monotonic()
        try:
            got = self.uc.fetch(etag, wait)
        except (Unreachable, Refused) as exc:
            self.fetch_took = time.monotonic() - t0
            self.failures += 1
            self.changed = False
            self.log(f"collect: undercloud {self.uc.base}: {exc}; using the cached metadata")
            return cached, False
        self.failures = 0
        self.changed, self.fetch_took = got.changed, time.monotonic() - t0
        if not got.changed:
            return cached, False
        _write_json(md_file, got.metadata)
        files.write_atomic(etag_file, got.etag or "")
        return got.metadata, True

    # --- apply / refresh ---
    def sources(self, metadata: dict) -> list[dict]:
        out = [_read_json(p, {}) for p in self.s.metadata_files]
        # A request for a health report (agent/watchdog.py) is no configuration: kept out of
        # the merge, it runs no refresh phases.
        out.append({k: v for k, v in metadata.items() if k != "health_request"})
        for d in metadata.get("deployments") or []:
            if d.get("group", "Heat::Ungrouped") in hooks.APPLY_GROUPS and isinstance(d.get("config"), dict):
                out.append(d["config"])
        return out

    def hook_env(self) -> dict:
        return dict(os.environ, UNDERCLOUD_AGENT_STATE=str(self.state),
                    UNDERCLOUD_AGENT_OUTPUT_ROOT=str(self.s.output_root),
                    OS_CONFIG_APPLIER_TEMPLATES=str(self.s.templates),
                    UNDERCLOUD_URL=self.s.url, UNDERCLOUD_SERVER_ID=self.s.server_id,
                    **({"UNDERCLOUD_CA_FILE": str(self.ca_file)} if self.s.ca else {}))

    def apply(self, metadata: dict) -> str | None:
        """Render templates and run the refresh phases when the merged metadata changed.
        Returns None on success (or nothing to do), else the failure reason."""
        merged = oac.merge_sources(self.sources(metadata))
        digest = hashlib.sha256(json.dumps(merged, sort_keys=True).encode()).hexdigest()
        _write_json(self.state / "merged.json", merged)  # 0600 from creation: it holds secrets
        applied = self.state / "applied.sha256"
        if applied.exists() and applied.read_text() == digest:
            return None
        try:
            written = oac.apply_config(self.s.templates, self.s.output_root, merged)
            if written:
                self.log(f"apply: wrote {len(written)} file(s)")
            env = dict(self.hook_env(), OS_CONFIG_FILES=str(self.state / "merged.json"))
            refresh(self.s.refresh_dir, env=env, timeout=self.s.hook_timeout, log=self.log)
        except (oac.ApplyError, RefreshError, OSError) as exc:
            self.log(f"apply: failed: {exc}")
            return str(exc)
        files.write_atomic(applied, digest)
        return None

    # --- deployments ---
    def _entry(self, did: str) -> Path:
        return self.journal / f"{did}.json"

    def deploy(self, metadata: dict, apply_error: str | None) -> None:
        deployments = [d for d in metadata.get("deployments") or [] if isinstance(d, dict) and d.get("id")]
        for d in deployments:
            self.log.secret_inputs(d.get("inputs") or [])
        for d in deployments:
            did = str(d["id"])
            entry = _read_json(self._entry(did), {})
            state = entry.get("state")
            if state == "done":
                continue
            if state != "signalling":
                if state == "running":
                    self.log(f"deployment {d.get('name')}: resuming after an interrupted run")
                    kill_orphan(entry)
                result = self.run_one(d, apply_error)
                entry = {"state": "signalling", "name": d.get("name"), "result": result}
                _write_json(self._entry(did), entry)
            self.send(did, d, entry)
        # Forget journal entries of deployments no longer in the metadata.
        live = {str(d["id"]) for d in deployments}
        for p in self.journal.glob("*.json"):
            if p.stem not in live and _read_json(p, {}).get("state") == "done":
                p.unlink(missing_ok=True)

    def run_one(self, d: dict, apply_error: str | None) -> dict:
        name, group = d.get("name"), d.get("group") or "Heat::Ungrouped"
        _write_json(self._entry(str(d["id"])), {"state": "running", "name": name, "started": time.time()})
        if group in hooks.APPLY_GROUPS:
            if apply_error:
                return hooks.failure(1, f"applying the metadata failed: {apply_error}")
            return {"deploy_stdout": "", "deploy_stderr": "", "deploy_status_code": 0}
        options = d.get("options") or {}
        timeout = float(options.get("timeout") or self.s.hook_timeout)
        self.log(f"deployment {name}: running hook {group!r} (timeout {timeout:g} s)")
        t0 = time.monotonic()
        cmd = hooks.command_for(group, self.s.hooks_dir)
        marker = cmd[-1] if cmd else ""

        def started(pid: int) -> None:
            _write_json(self._entry(str(d["id"])), {"state": "running", "name": name, "started": time.time(),
                                                    "pid": pid, "boot": boot_id(), "marker": marker})
        result = hooks.run(d, self.s.hooks_dir, timeout, env=self.hook_env(), started=started)
        if str(result.get("deploy_status_code") or 0) != "0":
            # The reason becomes the undercloud's status reason and events: masked like the log.
            reason = result.get("deploy_failure_reason") or next(
                (ln for ln in reversed(str(result.get("deploy_stderr") or "").splitlines()) if ln.strip()), "")
            # Cut at the contract's length, which a Pod's reason already keeps (agent/kube.py):
            # its end, the last lines of the service's log, says why it stopped.
            reason = self.log.mask(str(reason))
            result["deploy_failure_reason"] = (reason if len(reason) <= REASON_CHARS
                                               else reason[:REASON_CHARS - 1] + "…")
        self.log(f"deployment {name}: status {result.get('deploy_status_code')} "
                 f"in {time.monotonic() - t0:.1f} s"
                 + (f": {result['deploy_failure_reason']}" if result.get("deploy_failure_reason") else ""))
        return result

    def signal_body(self, result: dict) -> dict:
        body = {}
        for k, v in result.items():
            body[k] = trim(v, self.s.output_limit) if isinstance(v, str) else v
        return body

    def send(self, did: str, d: dict, entry: dict, attempts: int = 5) -> bool:
        """Signal with backoff; done only once acknowledged. Unacknowledged signals stay in
        the journal and are sent again on the next cycle."""
        transport = ((d.get("options") or {}).get("signal_transport")
                     or next((i.get("value") for i in d.get("inputs") or []
                              if i.get("name") == "deploy_signal_transport"), None))
        if transport == "NO_SIGNAL":
            _write_json(self._entry(did), dict(entry, state="done"))
            return True
        body = self.signal_body(entry["result"])
        delay = 0.5
        for attempt in range(attempts):
            try:
                self.uc.signal(did, body)
                _write_json(self._entry(did), {"state": "done", "name": entry.get("name")})
                self.log(f"deployment {entry.get('name')}: signal acknowledged")
                return True
            except Refused as exc:
                # The undercloud no longer knows this deployment (replaced or deleted).
                self.log(f"deployment {entry.get('name')}: signal refused ({exc}); dropping it")
                _write_json(self._entry(did), {"state": "done", "name": entry.get("name"), "refused": str(exc)})
                return True
            except Unreachable as exc:
                self.log(f"deployment {entry.get('name')}: signal not acknowledged ({exc}); "
                         f"retry {attempt + 1}/{attempts}")
                if attempt + 1 < attempts:
                    time.sleep(delay * random.uniform(0.8, 1.2))
                    delay = min(delay * 2, 30)
        return False

    # --- loop ---
    def cycle(self, wait: float = 0) -> bool:
        """One collect/apply/deploy round; returns whether the undercloud answered."""
        metadata, _changed = self.collect(wait)
        if metadata is None:
            return False
        apply_error = self.apply(metadata)
        self.deploy(metadata, apply_error)
        return self.failures == 0

    def start_watchdog(self, stop=None) -> None:
        """The watchdog (agent/watchdog.py) in a thread of its own: it keeps the played Pods
        up while run_forever waits on the undercloud, and goes on when it is away. Started by
        `undercloud-agent run` (it sets the process's UNDERCLOUD_AGENT_STATE)."""
        import threading

        from undercloud.agent import watchdog

        if self.s.watch_interval <= 0:
            return
        os.environ["UNDERCLOUD_AGENT_STATE"] = str(self.state)  # where the kube hook keeps its Pods
        threading.Thread(target=watchdog.run, args=(self.log, self.s.watch_interval, self.uc.report_health, stop),
                         name="watchdog", daemon=True).start()

    def hold(self) -> float:
        """This round's long-poll wait; 0 (a plain poll) when long-polling is off, while
        falling back to polling, and right after a long-poll was cut (to tell why)."""
        if not self.s.long_poll or self.s.hold <= 0 or self.probe or time.monotonic() < self.plain_until:
            return 0.0
        return self.s.hold

    def judge(self, hold: float, ok: bool, took: float) -> None:
        """After a round whose request took `took` s: was the long-poll held as asked? One answered at once without a
        change (an undercloud without long-polls), or cut while held when a plain poll just
        after gets through (a proxy ending long requests), is a cut; CUTS_TO_POLL in a row and
        the agent polls every `interval` for LONG_POLL_RETRY. An undercloud that stops (a
        restart) ends one held poll: one cut, not three."""
        if hold:
            if ok and (self.changed or took >= hold / 2):
                self.cuts = 0
            elif ok:
                self.cuts += 1
            elif took >= 1.0:
                self.probe = True  # cut, or the undercloud went away: the next, plain, poll tells
        elif self.probe:
            self.probe = False
            if ok:
                self.cuts += 1
        if self.cuts >= CUTS_TO_POLL:
            self.cuts = 0
            self.plain_until = time.monotonic() + LONG_POLL_RETRY
            self.log(f"collect: long-polls are not held or are cut (an older undercloud, or a proxy ending "
                     f"long requests): polling every {self.s.interval:g} s, trying the long-poll again in "
                     f"{LONG_POLL_RETRY / 60:.0f} min")

    def run_forever(self, stop=None) -> None:
        self.log(f"started: server {self.s.server_id}, undercloud {self.s.url}")
        while not (stop and stop()):
            t0 = time.monotonic()
            # The agent's first round polls plainly: a restarted agent acts on what it finds (a
            # deployment its stop interrupted) at once, not after a hold on an unchanged document.
            hold, self.started = (self.hold() if self.started else 0.0), True
            ok = self.cycle(hold)
            took = time.monotonic() - t0
            self.judge(hold, ok, self.fetch_took)
            j = random.uniform(1 - self.s.jitter, 1 + self.s.jitter)
            if not ok:
                # Undercloud away: back off (bounded) with jitter so a fleet spreads out.
                pause = min(self.s.interval, 0.5 * 2 ** min(self.failures, 8)) * j
            elif self.hold():
                # The long-poll already waited; pause only if it came back early, to bound the rate.
                pause = max(0.0, 0.05 * j - took)
            else:
                pause = self.s.interval * j
            if pause:
                time.sleep(pause)
