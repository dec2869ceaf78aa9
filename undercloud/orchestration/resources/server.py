"""OS::Nova::Server: a server realised by the servers service (provisioning/servers/).

The flavor's hypervisor_type decides how (bare-metal node, libvirt VM, podman container);
the image is the one named `image` for that hypervisor type. The server's id is the
resource's uuid, so a create resumed after a crash finds the server it started. Like
OS::Heat::DeployedServer it gets its agent credentials from the per-server metadata
service (orchestration/server_metadata.py): the token goes only into the first-boot data
the machine reads, and software deployments reach it through its metadata.

Updates, as Heat does them: `metadata`, `name`, `tags` in place; an `image` change rebuilds
in place where the hypervisor type can (`image_update_policy: REBUILD`, the default) and
replaces otherwise; `user_data` follows `user_data_update_policy`; `flavor` (no resize
here), `networks` and `scheduler_hints` changes replace.
"""

from __future__ import annotations

from undercloud.errors import NeedsFirstBoot, NotFound, UndercloudError
from undercloud.orchestration.resources.base import Plugin, Prop, ResourceFailure
from undercloud.orchestration.services import EngineOnly

ACCEPTED = "Accepted for Heat compatibility; not used by the undercloud."


class Server(Plugin):
    type_name = "OS::Nova::Server"
    properties_schema = {
        "name": Prop("string", update_allowed=True,
                     description="Server name, also its hostname (default: stack-resource). A rename "
                                 "changes the record, not the running machine's hostname (as in Nova)."),
        "image": Prop("string", required=True, update_allowed=True,
                      description="Image name or id; the image of that name for the flavor's hypervisor type."),
        "flavor": Prop("string", required=True, update_allowed=True, description="Flavor name."),
        "image_update_policy": Prop("string", default="REBUILD", update_allowed=True,
                                    allowed=("REBUILD", "REPLACE", "REBUILD_PRESERVE_EPHEMERAL"),
                                    description="REBUILD in place where the hypervisor type can, else replace."),
        "flavor_update_policy": Prop("string", default="RESIZE", update_allowed=True, allowed=("RESIZE", "REPLACE"),
                                     description="The undercloud cannot resize: a flavor change replaces."),
        "metadata": Prop("map", update_allowed=True,
                         description="Server metadata, also served to its agent beside `deployments`."),
        "user_data": Prop("string", default="", update_allowed=True,
                          description="First-boot user data (run once before the agent when it is a script)."),
        "user_data_format": Prop("string", default="HEAT_CFNTOOLS",
                                 allowed=("HEAT_CFNTOOLS", "RAW", "SOFTWARE_CONFIG"),
                                 description="SOFTWARE_CONFIG: user_data is a software config id whose "
                                             "config is used; RAW and HEAT_CFNTOOLS pass it as is."),
        "user_data_update_policy": Prop("string", default="REPLACE", allowed=("REPLACE", "IGNORE", "REBUILD"),
                                        update_allowed=True,
                                        description="What a user_data change does: replace the server, "
                                                    "nothing, or rebuild it in place with the new data."),
        "software_config_transport": Prop(
            "string", default="POLL_SERVER_CFN", update_allowed=True,
            allowed=("POLL_SERVER_CFN", "POLL_SERVER_HEAT", "POLL_TEMP_URL", "ZAQAR_MESSAGE"),
            description="Accepted for Heat compatibility: the agent always polls the undercloud's API."),
        "scheduler_hints": Prop("map", description="capabilities:KEY=VALUE hints for bare-metal nodes; "
                                "capabilities:hypervisor_hostname=HOST pins a container or VM server to a host."),
        "networks": Prop("list", description="[{network: ctlplane, fixed_ip: 192.168.24.10}]: the lab network."),
        "persistent_volumes": Prop("list", description="(undercloud) absolute paths kept across rebuilds."),
        **{k: Prop("any", description=ACCEPTED) for k in (
            "key_name", "admin_user", "config_drive", "availability_zone", "security_groups",
            "personality", "block_device_mapping", "block_device_mapping_v2", "reservation_id", "diskConfig")},
        **{k: Prop("any", update_allowed=True, description=ACCEPTED) for k in (
            "admin_pass", "deployment_swift_data")},
        "tags": Prop("list", update_allowed=True, description="Server tags (the `tags` attribute)."),
    }
    attributes_schema = {
        "name": "Name of the server.",
        "first_address": "The first IP address of the server (deprecated in Heat, kept for templates).",
        "networks": "{network: [ip, ...]} of the server.",
        "addresses": "{network: [{addr, version, OS-EXT-IPS:type}]} as Nova shows them.",
        "accessIPv4": "The server's IPv4 address (its first).",
        "accessIPv6": "The server's IPv6 address (none here).",
        "instance_name": "The name on its hypervisor (container name, domain, node).",
        "console_urls": "Console URLs (none: use `undercloud server console`).",
        "tags": "The server's tags.",
        "os_collect_config": "Where the agent polls (metadata URL without the token).",
        "show": "The server as the servers API shows it.",
    }
    blocking = True
    poll_interval = 0.2

    # -- helpers --------------------------------------------------------------------
    def server_name(self) -> str:
        return self.properties.get("name") or f"{self.stack.name}-{self.name}".replace("_", "-")

    def _svc(self):
        return self.services.servers, self.services.server_metadata

    def _extra(self) -> dict:
        extra = dict(self.metadata or {}) if isinstance(self.metadata, dict) else {}
        extra.update(self.properties.get("metadata") or {})
        return extra

    def _user_data(self) -> str:
        p = self.properties
        data = p.get("user_data") or ""
        if p.get("user_data_format") == "SOFTWARE_CONFIG" and data:
            from undercloud.orchestration.resources.software_deployment import load_config

            config = load_config(self, data).get("config")
            return config if isinstance(config, str) else ("" if config is None else str(config))
        return data if isinstance(data, str) else str(data)

    def _first_boot(self, meta, sid: str) -> dict:
        """New agent credentials (rotating any earlier token) and what the machine boots with."""
        token = meta.register(sid, self.server_name())
        meta.set_extra(sid, self._extra())
        p = self.properties
        return {**meta.agent_config(sid, token), "metadata": p.get("metadata") or {},
                "user_data": self._user_data(), "user_data_format": p.get("user_data_format")}

    @property
    def server_id(self) -> str:
        return self.physical_id or self.uuid

    # -- actions --------------------------------------------------------------------
    def create(self) -> None:
        servers, meta = self._svc()
        sid = self.server_id
        self.physical_id = sid
        p = self.properties
        try:
            if servers.exists(sid):  # a create resumed after a crash: same token, same machine
                try:
                    servers.resume(sid)
                except NeedsFirstBoot:
                    servers.resume(sid, self._first_boot(meta, sid))
            else:
                servers.create(id=sid, name=self.server_name(), flavor=p["flavor"], image=p["image"],
                               first_boot=self._first_boot(meta, sid), networks=p.get("networks"),
                               metadata=p.get("metadata"), volumes=p.get("persistent_volumes"),
                               owner=self.uuid, scheduler_hints=p.get("scheduler_hints"))
        except UndercloudError as exc:
            if not servers.exists(sid):
                meta.forget(sid)  # nothing was made: no credentials left behind either
            raise ResourceFailure(str(exc)) from None
        ht = servers.get(sid)["hypervisor_type"]
        self.data["can_rebuild"] = servers.realiser(ht).can_rebuild

    def check_complete(self, action: str) -> bool:
        if action == "DELETE" and isinstance(self.services, EngineOnly):
            return True  # an engine on its own never made a server
        servers, meta = self._svc()
        if action == "DELETE":
            if not servers.gone(self.server_id):
                return False
            meta.forget(self.server_id)
            return True
        srv = servers.refresh(self.server_id)
        if srv["status"] == "ERROR":
            raise ResourceFailure(f"server {srv['name']} went to ERROR: {srv['fault']}")
        return srv["status"] in ("ACTIVE", "SHUTOFF")

    def needs_replace(self, changed: set[str], old_properties: dict) -> bool:
        if "flavor" in changed:
            return True
        if "user_data" in changed or "user_data_format" in changed:
            policy = self.properties.get("user_data_update_policy")
            if policy == "REPLACE" or (policy == "REBUILD" and not self.data.get("can_rebuild")):
                return True
        if "image" in changed:
            # Decided from what create stored: the engine asks before it hands out services.
            return self.properties.get("image_update_policy") == "REPLACE" or not self.data.get("can_rebuild")
        return False

    def update(self, old_properties: dict) -> None:
        servers, meta = self._svc()
        p = self.properties
        meta.set_extra(self.server_id, self._extra())
        servers.set_metadata(self.server_id, p.get("metadata") or {}, name=self.server_name())
        user_data = None
        if p.get("user_data_update_policy") == "REBUILD" and (
                p.get("user_data") != old_properties.get("user_data")
                or p.get("user_data_format") != old_properties.get("user_data_format")):
            user_data = {"user_data": self._user_data(), "user_data_format": p.get("user_data_format")}
        if p.get("image") != old_properties.get("image") or user_data is not None:
            try:
                servers.rebuild(self.server_id, p["image"], first_boot=user_data)
            except UndercloudError as exc:
                raise ResourceFailure(str(exc)) from None

    def delete(self) -> None:
        if isinstance(self.services, EngineOnly):
            return  # an engine on its own never made a server
        servers, _meta = self._svc()
        try:
            servers.delete(self.server_id)
        except NotFound:
            pass
        except UndercloudError as exc:
            raise ResourceFailure(str(exc)) from None

    def waiting_for(self, action: str) -> str:
        if action == "DELETE":
            return f"server {self.server_name()} to be removed"
        return f"server {self.server_name()} to become ACTIVE"

    def attributes(self) -> dict:
        servers, meta = self._svc()
        srv = servers.get(self.server_id)
        ips = {net: [a for a in addrs if a] for net, addrs in (srv.get("addresses") or {}).items()}
        first = next((a for addrs in ips.values() for a in addrs), "")
        url = f"{meta.url()}/v1/agent/servers/{self.server_id}/metadata"
        return {
            "name": srv["name"], "first_address": first, "networks": ips,
            "addresses": {net: [{"addr": a, "version": 6 if ":" in a else 4, "OS-EXT-IPS:type": "fixed"}
                                for a in addrs] for net, addrs in ips.items()},
            "accessIPv4": next((a for addrs in ips.values() for a in addrs if ":" not in a), ""),
            "accessIPv6": "", "instance_name": srv.get("instance_name") or srv["name"],
            "os_collect_config": {"collectors": ["request"], "request": {"metadata_url": url}},
            "console_urls": {}, "tags": self.properties.get("tags") or [], "show": srv,
        }
