"""The agent's configuration: a JSON file (first-boot data or written by the operator).

{"url": "https://192.0.2.1:8787", "server_id": "...", "token": "...", "ca": "-----BEGIN
CERTIFICATE-----...", "state_dir": "/var/lib/undercloud-agent", ...}; every key below has a
default except url, server_id and token. `ca`: the undercloud's CA certificate (PEM), which
an https `url` is verified with (an agent configured before TLS has an http:// url and none).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

DEFAULT_CONFIG = Path("/etc/undercloud-agent/config.json")
DEFAULT_STATE = Path("/var/lib/undercloud-agent")
# A deploy_failure_reason's length at most (every hook's; a Pod's keeps its log's last lines
# within it): it becomes a resource's status reason and its events, well within the engine's
# message limit (orchestration/limits.py's message_chars).
REASON_CHARS = 1200


def state_base() -> Path:
    """The state directory, in a hook or Pod process: the agent passes its own in
    UNDERCLOUD_AGENT_STATE."""
    return Path(os.environ.get("UNDERCLOUD_AGENT_STATE", str(DEFAULT_STATE)))


class SettingsError(Exception):
    pass


@dataclass
class Settings:
    url: str
    server_id: str
    token: str
    ca: str = ""                    # the undercloud's CA (PEM): an https url is verified with it
    state_dir: Path = DEFAULT_STATE
    templates: Path = Path("/usr/libexec/os-apply-config/templates")
    output_root: Path = Path("/")
    refresh_dir: Path = Path("/usr/libexec/os-refresh-config")
    hooks_dir: Path = Path("/var/lib/heat-config/hooks")
    # Extra metadata files merged before the undercloud's document (later wins).
    metadata_files: list[Path] = field(default_factory=list)
    interval: float = 30.0          # seconds between polls when not long-polling (the fallback)
    jitter: float = 0.25            # +-25 % so a fleet does not poll in step
    long_poll: bool = True
    hold: float = 25.0              # a long-poll's wait: under the 30 s after which proxies often cut
    hook_timeout: float = 3600.0    # unless a deployment's options.timeout says otherwise
    output_limit: int = 256 * 1024  # per signalled text value, beyond it trimmed with a marker
    request_timeout: float = 10.0
    watch_interval: float = 2.0     # the watchdog's round (agent/watchdog.py); 0: no watchdog

    @classmethod
    def load(cls, path: Path) -> Settings:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise SettingsError(f"{path}: cannot read the agent configuration: {exc.strerror}") from None
        except ValueError as exc:
            raise SettingsError(f"{path}: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise SettingsError(f"{path}: expected a JSON object")
        known = {f.name: f for f in fields(cls)}
        missing = [k for k in ("url", "server_id", "token") if not data.get(k)]
        if missing:
            raise SettingsError(f"{path}: {missing[0]}: required")
        kwargs = {}
        for k, v in data.items():
            if k not in known:
                continue  # first-boot data carries more (hostname, ...): ignore it
            default = known[k].default
            if isinstance(default, Path):
                v = Path(v)
            elif k == "metadata_files":
                v = [Path(p) for p in v]
            elif isinstance(default, bool):
                v = bool(v)
            elif isinstance(default, (int, float)):
                if not isinstance(v, (int, float)) or isinstance(v, bool):
                    raise SettingsError(f"{path}: {k}: expected a number, got {v!r}")
            kwargs[k] = v
        return cls(**kwargs)
