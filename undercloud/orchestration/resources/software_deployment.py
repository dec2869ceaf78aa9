"""Software deployments: a software config bound to a server, applied by its agent.

OS::Heat::SoftwareDeployment and StructuredDeployment put a Heat-shaped entry (the
"derived config": id, name, group, config, inputs with the derived deploy_* inputs,
outputs, options) into the server's metadata (orchestration/server_metadata.py), then
wait for the agent's signal: COMPLETE, or FAILED when deploy_status_code is non-zero or
an output flagged error_output is set (Heat's rules and messages). The group types
(SoftwareDeployments/SoftwareDeploymentGroup, StructuredDeployments/...Group) are nested
stacks of one deployment per entry of `servers`, as in Heat.

Resumable: the entry's id is derived from this resource's uuid, the action and the
content, so a create repeated after a crash finds the entry it already published (and
any signal already received) instead of running the deployment twice.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from undercloud.orchestration.limits import LIMITS, exceeded
from undercloud.orchestration.resources.base import Plugin, Prop, ResourceFailure
from undercloud.orchestration.resources.group import ResourceGroup, in_batches
from undercloud.orchestration.services import EngineOnly
from undercloud.orchestration.template.validation import placeholder_properties, validate_properties

if TYPE_CHECKING:
    from collections.abc import Mapping

    from undercloud.orchestration.template.definitions import ResourceDefinition
    from undercloud.orchestration.template.stack import StackTemplate

SIGNAL_TRANSPORTS = ("CFN_SIGNAL", "TEMP_URL_SIGNAL", "HEAT_SIGNAL", "NO_SIGNAL", "ZAQAR_SIGNAL")
ACTIONS = ("CREATE", "UPDATE", "DELETE", "SUSPEND", "RESUME")
CONFIG_TYPES = ("OS::Heat::SoftwareConfig", "OS::Heat::StructuredConfig", "OS::Heat::CloudConfig",
                "OS::Heat::MultipartMime")
STD_OUTPUTS = ("deploy_stdout", "deploy_stderr", "deploy_status_code")
NAMESPACE = uuid.UUID("0f4e2a43-8d3c-4c3b-9a43-2b1bd8c3a7d1")

DEPLOYMENT_PROPS = {
    "config": Prop("string", update_allowed=True,
                   description="ID of the software config resource to apply to the server."),
    "server": Prop("string", required=True, description="ID of the server to apply the config to."),
    "input_values": Prop("map", update_allowed=True, description="Input values for the config on this server."),
    "actions": Prop("list", default=["CREATE", "UPDATE"], update_allowed=True,
                    description="Which lifecycle actions of this resource run the deployment."),
    "name": Prop("string", update_allowed=True,
                 description="Name of the derived config (sort order in the server's metadata)."),
    "signal_transport": Prop("string", default="CFN_SIGNAL", allowed=SIGNAL_TRANSPORTS,
                             description="How the agent signals back; NO_SIGNAL completes without waiting. "
                                         "Every other value uses the undercloud's agent signal API."),
}


def load_config(plugin: Plugin, config_id: str | None) -> dict:
    """The software config (id, name, group, config, options, inputs, outputs) by its id."""
    if not config_id:
        return {"id": None, "name": None, "group": "Heat::Ungrouped", "config": "", "options": {},
                "inputs": [], "outputs": []}
    peer = plugin.find_peer(config_id)
    if peer is not None and hasattr(peer, "config"):
        return peer.config()
    found = plugin.services.stacks.software_config(config_id, CONFIG_TYPES)  # e.g. passed down as a parameter
    if found:
        return found
    raise ResourceFailure(f"config: software config {config_id!r} not found")


def parse_inputs(snippet: Any, inputs: dict, input_key: str = "get_input", strict: bool = False) -> Any:
    """Heat's StructuredDeployment.parse: replace {get_input: NAME} by the input's value."""
    if isinstance(snippet, dict):
        if len(snippet) == 1:
            (fn, arg), = snippet.items()
            if fn == input_key and isinstance(arg, str):
                if strict and arg not in inputs:
                    raise ResourceFailure(f"input_values: the input {arg!r} is needed by the config "
                                          f"({input_key}) but has no value")
                return inputs.get(arg)
        return {k: parse_inputs(v, inputs, input_key, strict) for k, v in snippet.items()}
    if isinstance(snippet, list):
        return [parse_inputs(v, inputs, input_key, strict) for v in snippet]
    return snippet


class SoftwareDeployment(Plugin):
    type_name = "OS::Heat::SoftwareDeployment"
    properties_schema = DEPLOYMENT_PROPS
    attributes_schema = {
        "deploy_stdout": "Captured stdout from the configuration execution.",
        "deploy_stderr": "Captured stderr from the configuration execution.",
        "deploy_status_code": "Returned status code from the configuration execution.",
        "OUTPUT": "Any output the config declares: its value as signalled.",
    }
    blocking = True  # store writes
    poll_interval = 0.3

    # -- helpers ------------------------------------------------------------------------
    @property
    def meta(self):
        return self.services.server_metadata

    def derived_config(self, source: dict, inputs: list[dict]) -> Any:
        return source.get("config")

    def derived_inputs(self, source: dict, action: str) -> list[dict]:
        p = self.properties
        values = dict(p.get("input_values") or {})
        out = []
        for i in source.get("inputs") or []:
            i = dict(i)
            i["value"] = values.pop(i["name"], i.get("default"))
            i.setdefault("type", "String")
            out.append(i)
        for k, v in values.items():
            out.append({"name": k, "type": "String", "value": v})
        server = p.get("server")
        out += [
            {"name": "deploy_server_id", "type": "String", "value": server,
             "description": "ID of the server being deployed to"},
            {"name": "deploy_action", "type": "String", "value": action,
             "description": "Name of the current action being deployed"},
            {"name": "deploy_stack_id", "type": "String", "value": f"{self.stack.name}/{self.stack.id}",
             "description": "ID of the stack this deployment belongs to"},
            {"name": "deploy_resource_name", "type": "String", "value": self.name,
             "description": "Name of this deployment resource in the stack"},
            {"name": "deploy_signal_transport", "type": "String", "value": p.get("signal_transport") or "CFN_SIGNAL",
             "description": "How the server should signal to heat with the deployment output values."},
        ]
        if (p.get("signal_transport") or "CFN_SIGNAL") != "NO_SIGNAL":
            # The agent signals with its own token; this URL (no credential in it) says where.
            out += [{"name": "deploy_signal_id", "type": "String", "value": None,
                     "description": "ID of signal to use for signaling output values"},
                    {"name": "deploy_signal_verb", "type": "String", "value": "POST",
                     "description": "HTTP verb to use for signaling output values"}]
        return out

    def source(self, config_id: str | None) -> dict:
        """The config by its id. The last two used are kept in the resource's data: a
        member rolled back within max_fail goes back to a config its stack may have
        replaced (and deleted) since."""
        kept = self.data.get("sources") or {}
        if config_id and config_id in kept and config_id == self.data.get("config_id"):
            # A config's content never changes under its id (a changed config is a new
            # resource, a new id): an update of the inputs alone reads no store (a fleet's
            # update did one table scan per member, 2,000 of them)
            return kept[config_id]
        try:
            src = load_config(self, config_id)
        except ResourceFailure:
            if config_id in kept:
                return kept[config_id]
            raise
        last = self.data.get("config_id")
        if config_id and config_id != last:
            self.data["sources"] = {**({last: kept[last]} if last in kept else {}), config_id: src}
            self.data["config_id"] = config_id
        return src

    def entry(self, action: str) -> dict:
        p = self.properties
        source = self.source(p.get("config"))
        inputs = self.derived_inputs(source, action)
        body = {
            "name": p.get("name") or source.get("name") or f"{self.stack.name}-{self.name}",
            "group": source.get("group") or "Heat::Ungrouped",
            "config": self.derived_config(source, inputs),
            "inputs": inputs,
            "outputs": source.get("outputs") or [],
            "options": source.get("options") or {},
        }
        if body["config"] is None:
            body["config"] = ""
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
        did = str(uuid.uuid5(NAMESPACE, f"{self.uuid}:{action}:{digest}"))
        server = p.get("server")
        for i in inputs:
            if i["name"] == "deploy_signal_id":
                i["value"] = f"{self.meta.url()}/v1/agent/servers/{server}/deployments/{did}/signal"
        return {"id": did, **body, "creation_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def run_action(self, action: str) -> None:
        """Publish the deployment for `action`, or note that this action does not run it."""
        self.physical_id = self.physical_id or self.uuid
        actions = self.properties.get("actions") or []
        bad = [a for a in actions if a not in ACTIONS]
        if bad:
            raise ResourceFailure(f"actions: {bad[0]!r} is not one of {', '.join(ACTIONS)}")
        if action not in actions:
            self.data["pending"] = None
            return
        server = self.properties.get("server")
        if not server or not self.meta.exists(str(server)):
            raise ResourceFailure(f"server: {server!r} has no agent in this undercloud (deploy to an "
                                  "OS::Heat::DeployedServer or OS::Nova::Server)")
        entry = self.entry(action)
        prev = self.meta.deployment_server(entry["id"])
        if prev is None:  # not published yet (a resumed call finds its own entry)
            self.meta.put_deployment(str(server), entry, owner=self.uuid)
        self.data.update(pending=entry["id"], server=str(server), action=action, deployment_id=entry["id"],
                         outputs=[o.get("name") for o in entry["outputs"]],
                         error_outputs=[o.get("name") for o in entry["outputs"] if o.get("error_output")],
                         group=entry["group"], entry_name=entry["name"])

    def no_signal(self) -> bool:
        return (self.properties.get("signal_transport") or "CFN_SIGNAL") == "NO_SIGNAL"

    def finished(self) -> bool:
        did = self.data.get("pending")
        if not did:
            return True
        if self.no_signal():
            self.data["pending"] = None
            return True
        sig = self.meta.signal_of(did)
        if sig is None:
            return False
        self.data["pending"] = None
        self.data["values"] = {k: sig.get(k) for k in (*STD_OUTPUTS, *self.data.get("outputs", [])) if k in sig}
        reasons = []
        code = sig.get("deploy_status_code")
        if code and str(code) != "0":
            reasons.append(f"deploy_status_code : Deployment exited with non-zero status code: {code}")
        for name in self.data.get("error_outputs", []):
            if name in sig:
                reasons.append(f"{name} : {sig[name]}")
        if reasons:
            detail = sig.get("deploy_failure_reason") or _last_line(sig.get("deploy_stderr"))
            raise ResourceFailure("Deployment to server failed: " + ", ".join(reasons)
                                  + (f" ({detail})" if detail else ""))
        return True

    # -- the plugin interface -----------------------------------------------------------
    def create(self) -> None:
        self.run_action("CREATE")

    def update(self, old_properties: dict) -> None:
        self.run_action("UPDATE")

    def check_complete(self, action: str) -> bool:
        if action == "DELETE":
            try:
                if not self.finished():
                    return False
            finally:
                if not self.data.get("pending"):
                    self._forget()
            return True
        return self.finished()

    def poll_blocks(self, action: str) -> bool:
        # Waiting for a signal is a dict lookup, inline: 2,000 deployments polled through the
        # pool every 0.3 s took the CPU their agents' signals needed. DELETE forgets (a write).
        return action == "DELETE"

    def delete(self) -> None:
        self.data["pending"] = None
        server = self.data.get("server") or self.properties.get("server")
        if "DELETE" in (self.properties.get("actions") or []) and server and self.meta.exists(str(server)):
            try:
                self.run_action("DELETE")
                return
            except ResourceFailure:
                pass
        self._forget()

    def _forget(self) -> None:
        if not isinstance(self.services, EngineOnly):  # on its own, the engine gave no agent anything
            self.services.server_metadata.remove_owner(self.uuid)

    def signal(self, payload: dict) -> None:
        """`stack resource signal` on a deployment: the same as the agent's signal."""
        did = self.data.get("pending") or self.data.get("deployment_id")
        if not did:
            raise ResourceFailure("no deployment in progress to signal")
        self.meta.record_signal(self.meta.deployment_server(did) or "", did,
                                payload if isinstance(payload, dict) else {"deploy_stdout": str(payload)})

    def attributes(self) -> dict:
        values = dict(self.data.get("values") or {})
        for k in (*STD_OUTPUTS, *self.data.get("outputs", [])):
            values.setdefault(k, None)
        return values

    def waiting_for(self, action: str) -> str:
        server = self.data.get("server") or self.properties.get("server")
        return (f"the agent on server {server} to signal deployment {self.data.get('entry_name') or self.name} "
                f"(group {self.data.get('group') or '?'}, {action.lower()})")


class StructuredDeployment(SoftwareDeployment):
    """A deployment whose (map) config has {get_input: NAME} replaced by the inputs' values."""

    type_name = "OS::Heat::StructuredDeployment"
    properties_schema = {
        **DEPLOYMENT_PROPS,
        "input_key": Prop("string", default="get_input",
                          description="Name of the function that marks an input in the config."),
        "input_values_validate": Prop("string", default="LAX", allowed=("LAX", "STRICT"),
                                      description="STRICT: an input used by the config must have a value."),
    }

    def derived_config(self, source: dict, inputs: list[dict]) -> Any:
        values = {i["name"]: i.get("value") for i in inputs}
        return parse_inputs(source.get("config"), values, self.properties.get("input_key") or "get_input",
                            self.properties.get("input_values_validate") == "STRICT")


def _last_line(text: Any) -> str:
    lines = [ln for ln in str(text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


GROUP_ATTRS = {"deploy_stdouts": "deploy_stdout", "deploy_stderrs": "deploy_stderr",
               "deploy_status_codes": "deploy_status_code"}


class SoftwareDeploymentGroup(ResourceGroup):
    """One SoftwareDeployment per entry of `servers` (name -> server id), as a nested stack."""

    type_name = "OS::Heat::SoftwareDeploymentGroup"
    member_type = "OS::Heat::SoftwareDeployment"
    properties_schema = {
        "servers": Prop("map", required=True, update_allowed=True,
                        description="Names (the member resources' names) -> server ids."),
        **{k: v for k, v in DEPLOYMENT_PROPS.items() if k != "server"},
    }
    attributes_schema = {
        "deploy_stdouts": "{name: deploy_stdout} of every server.",
        "deploy_stderrs": "{name: deploy_stderr} of every server.",
        "deploy_status_codes": "{name: deploy_status_code} of every server.",
        "ATTR": "Any attribute of the member deployments (outputs too), as {name: value}.",
    }

    # Its members come from `servers`, not a resource_def: at load and preview it is any
    # plugin, not the ResourceGroup it builds on.
    @classmethod
    def validate_definition(cls, t: StackTemplate, rd: ResourceDefinition) -> None:
        """Its properties, and `servers` (when known) within the group limit."""
        if not t.check_values or not isinstance(rd.properties, dict) or rd.external_id is not None:
            validate_properties(t, rd)
            return
        resolved = placeholder_properties(t, rd)
        validate_properties(t, rd, resolved)
        servers = resolved.get("servers")
        if isinstance(servers, dict) and len(servers) > LIMITS.group_count:
            t.add(("resources", rd.name, "properties", "servers"),
                  exceeded("group_count", "the count of members", len(servers)))

    @classmethod
    def preview_child(cls, t: StackTemplate, name: str, props: Mapping) -> StackTemplate | None:
        return None

    def nested_template(self, parent_template: Any) -> Any:
        p = dict(self.properties)
        servers = p.pop("servers", None) or {}
        if len(servers) > LIMITS.group_count:  # known only now: refused before any member is made
            raise ResourceFailure(exceeded("group_count", "the count of members", len(servers)))
        resources = {}
        for name, server in servers.items():
            props = {k: v for k, v in p.items() if v is not None and k in self.properties_schema}
            props["server"] = server
            resources[str(name)] = {"type": self.member_type, "properties": props}
        template = {"heat_template_version": "2015-04-30", "resources": in_batches(resources, self.batch())}
        return parent_template.child_from_dict(template, {}, self.name)

    def attributes(self) -> dict:
        members = self.nested.members if self.nested else {}
        return {"members": {n: attrs for n, (_ref, attrs) in members.items()}, "order": list(members)}

    @classmethod
    def resolve_attribute(cls, attrs: dict, name: str, path: list) -> Any:
        member_attr = GROUP_ATTRS.get(name, name)
        members = attrs.get("members", {})
        value = {n: Plugin.resolve_attribute(members[n], member_attr, []) for n in attrs.get("order", [])}
        return Plugin.resolve_attribute({"v": value}, "v", path)


class SoftwareDeployments(SoftwareDeploymentGroup):
    type_name = "OS::Heat::SoftwareDeployments"


class StructuredDeploymentGroup(SoftwareDeploymentGroup):
    type_name = "OS::Heat::StructuredDeploymentGroup"
    member_type = "OS::Heat::StructuredDeployment"
    properties_schema = {
        **SoftwareDeploymentGroup.properties_schema,
        "input_key": StructuredDeployment.properties_schema["input_key"],
        "input_values_validate": StructuredDeployment.properties_schema["input_values_validate"],
    }


class StructuredDeployments(StructuredDeploymentGroup):
    type_name = "OS::Heat::StructuredDeployments"
