"""OS::Heat::DeployedServer: a server that exists already and runs the agent.

The resource gives the server an id and a token (orchestration/server_metadata.py) and
writes the agent's configuration, readable by the owner only, to
`$UNDERCLOUD_HOME/agents/<server id>.json`; the `agent_config` attribute names that file.
Run the agent on the machine with it:

    python3 -m undercloud.agent run --config $UNDERCLOUD_HOME/agents/<id>.json

or issue a new one (rotating the token) with `undercloud agent config SERVER -o FILE`.
The resource's `metadata` section is served beside `deployments` (os-apply-config
templates read it), as Heat does for servers that poll their metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

from undercloud.agent.files import write_atomic
from undercloud.orchestration.resources.base import Plugin, Prop, ResourceFailure
from undercloud.orchestration.services import EngineOnly


def agent_config_path(home_path: Path, server_id: str) -> Path:
    return home_path / "agents" / f"{server_id}.json"


def write_agent_config(home_path: Path, server_id: str, config: dict) -> Path:
    path = agent_config_path(home_path, server_id)
    write_atomic(path, json.dumps(config, indent=2, sort_keys=True))
    return path


class DeployedServer(Plugin):
    type_name = "OS::Heat::DeployedServer"
    properties_schema = {
        "name": Prop("string", update_allowed=True, description="Server name (default: the physical name)."),
        "metadata": Prop("map", update_allowed=True, description="Served to the agent beside `deployments`."),
        "software_config_transport": Prop(
            "string", default="POLL_SERVER_CFN",
            allowed=("POLL_SERVER_CFN", "POLL_SERVER_HEAT", "POLL_TEMP_URL", "ZAQAR_MESSAGE"),
            description="Accepted for Heat compatibility: the agent always polls the undercloud's API."),
        "deployment_swift_data": Prop("map", description="Accepted for Heat compatibility; unused."),
    }
    attributes_schema = {
        "name": "The server's name.",
        "networks": "Networks of the server (none known for a pre-provisioned server).",
        "os_collect_config": "Where the agent polls (metadata URL without the token).",
        "agent_config": "Path of the agent configuration file (mode 600) on the undercloud host.",
        "server_id": "The id the agent presents.",
    }
    blocking = True

    def server_name(self) -> str:
        return self.properties.get("name") or f"{self.stack.name}-{self.name}"

    def _meta(self):
        return self.services.server_metadata, self.services.home

    def _extra(self) -> dict:
        extra = dict(self.metadata or {}) if isinstance(self.metadata, dict) else {}
        extra.update(self.properties.get("metadata") or {})
        return extra

    def create(self) -> None:
        meta, home = self._meta()
        server_id = self.physical_id or self.uuid
        self.physical_id = server_id
        if not (meta.exists(server_id) and self.data.get("agent_config")):
            token = meta.register(server_id, self.server_name())  # a resumed create rotates: fine
            self.data["agent_config"] = str(write_agent_config(home.path, server_id,
                                                               meta.agent_config(server_id, token)))
        meta.set_extra(server_id, self._extra())

    def update(self, old_properties: dict) -> None:
        meta, _home = self._meta()
        if not meta.exists(self.physical_id or ""):
            raise ResourceFailure(f"server {self.physical_id} lost its agent credentials")
        meta.set_extra(self.physical_id, self._extra())

    def delete(self) -> None:
        # A create cancelled while it ran (another resource failed) may have registered the
        # server without its id being stored: that id is the resource's uuid, as create gives.
        server_id = self.physical_id or self.uuid
        if server_id and not isinstance(self.services, EngineOnly):  # on its own: no agent
            self.services.server_metadata.forget(server_id)
            agent_config_path(self.services.home.path, server_id).unlink(missing_ok=True)
        if self.data.get("agent_config"):
            Path(self.data["agent_config"]).unlink(missing_ok=True)

    def attributes(self) -> dict:
        meta, _home = self._meta()
        url = f"{meta.url()}/v1/agent/servers/{self.physical_id}/metadata"
        return {"name": self.server_name(), "networks": {}, "server_id": self.physical_id,
                "os_collect_config": {"collectors": ["request"], "request": {"metadata_url": url}},
                "agent_config": self.data.get("agent_config")}
