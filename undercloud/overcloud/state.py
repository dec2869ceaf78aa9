"""An overcloud's kept state as the CLI sees it: its secrets, deployed image sets and last
deploy, read from and written to the service's store (`/v1/overcloud-state`), so a deploy
through any worker, from any home, keeps the same passwords and knows what was deployed.

A home where an older undercloud kept these as files (`overcloud/<stack>/*.json`) has
them moved into the store the first time they are read there."""

from __future__ import annotations

import json
import logging
from typing import Any

from undercloud.overcloud.secrets import missing_secrets, stack_dir

log = logging.getLogger("undercloud.overcloud")
HOME_FILES = {"secrets": "secrets.json", "deployed-sets": "deployed-sets.json", "last-deploy": "last-deploy.json"}


class StackState:
    """`client`: the CLI's Client (get, put, patch, delete and its home)."""

    def __init__(self, client, stack: str):
        self.dir = stack_dir(client.home.path, stack)  # refuses a bad name
        self.client, self.stack = client, stack
        self._kept: dict[str, Any] | None = None

    def get(self, name: str, default: Any = None) -> Any:
        if self._kept is None:
            self._kept = self.client.get(f"/v1/overcloud-state/{self.stack}")
            self._move_home_files()
        value = self._kept.get(name)
        return default if value is None else value

    def put(self, name: str, value: Any) -> None:
        self.get(name)
        self._kept[name] = self.client.put(f"/v1/overcloud-state/{self.stack}/{name}", json={"value": value})

    def secrets(self, kinds: dict[str, str] | None = None, given: dict[str, str] | None = None) -> dict[str, Any]:
        """The stack's secrets: every name of `kinds` (name -> password | fernet) made on
        first use, `given` ones (set in your environments) taking their place; kept, so every
        user of a secret (services, clouds.yaml) agrees."""
        kept = self.get("secrets", {})
        given = {k: v for k, v in (given or {}).items() if kept.get(k) != v}
        missing = missing_secrets(kept, kinds or {})
        if given or missing:
            self._kept["secrets"] = kept = self.client.patch(
                f"/v1/overcloud-state/{self.stack}/secrets", json={"given": given, "missing": missing})
        return kept

    def forget(self) -> None:
        self.client.delete(f"/v1/overcloud-state/{self.stack}")
        self._kept = {}

    def _move_home_files(self) -> None:
        for name, file in HOME_FILES.items():
            path = self.dir / file
            if name in self._kept or not path.is_file():
                continue
            try:
                value = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                log.warning("%s: not moved into the store (%s)", path, type(exc).__name__)
                continue
            self._kept[name] = self.client.put(f"/v1/overcloud-state/{self.stack}/{name}", json={"value": value})
            path.unlink()
