"""Each server's first-boot files: `$UNDERCLOUD_HOME/servers/<id>/first-boot/`.

What a machine reads at its first boot (its agent's token and where the agent reaches the
undercloud, its hostname, networks and user data) is written here once, in a directory of
mode 700, and realisers hand it to the machine read-only (container mount, config-drive
ISO, ...). A resumed or rebuilt server reads it back (same token). Apart from the servers
service so that the layout of these files is spelt in one place.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.provisioning.servers.base import Env, Spec


class FirstBootFiles:
    def __init__(self, root: Path, env: Env):
        self.root = root  # $UNDERCLOUD_HOME/servers: one directory per server
        self.env = env

    def dir(self, server_id: str) -> Path:
        return self.root / server_id / "first-boot"

    def read(self, server_id: str) -> dict:
        try:
            return json.loads((self.dir(server_id) / "config.json").read_text())
        except (OSError, ValueError):
            return {}

    def write(self, spec: Spec, agent_url: Callable[[Spec], str]) -> None:
        """Write `spec.first_boot` with what the agent needs added (`agent_url(spec)`: where
        it reaches the undercloud, asked once the directory is there), and keep that in
        `spec.first_boot`."""
        d = self.dir(spec.id)
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d.parent, 0o700)
        spec.first_boot["url"] = agent_url(spec)
        spec.first_boot["ca"] = self.env.ca()  # what the agent verifies that URL with
        data = dict(spec.first_boot, hostname=spec.name, server_id=spec.id, networks=spec.networks)
        write_atomic(d / "config.json", json.dumps(data, indent=2, sort_keys=True))
        # user data also as a file of its own (NoCloud's name), executable when it is a script
        ud = data.get("user_data")
        path = d / "user-data"
        if isinstance(ud, str) and ud:
            write_atomic(path, ud, 0o700 if ud.startswith("#!") else 0o600)
        else:
            path.unlink(missing_ok=True)
        spec.first_boot = data

    def remove(self, server_id: str) -> None:
        """The server's whole directory (its server is gone, or gone from this undercloud)."""
        shutil.rmtree(self.root / server_id, ignore_errors=True)
