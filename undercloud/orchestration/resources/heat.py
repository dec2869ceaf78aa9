"""The OS::Heat types that need no cloud service: Value, RandomString, None, TestResource,
SoftwareConfig, StructuredConfig, WaitConditionHandle, WaitCondition."""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Mapping
from typing import Any

from undercloud.names import fit_name
from undercloud.orchestration.resources.base import Plugin, Prop, ResourceFailure
from undercloud.orchestration.template.functions import has_unknown
from undercloud.orchestration.template.validation import (
    bound_problem,
    placeholder_properties,
    validate_properties,
)


def physical_name(p: Plugin) -> str:
    """Heat's physical resource name: stack-resource-suffix (the suffix is stable per uuid),
    cut to what a name may hold as Heat cuts it (the suffix kept)."""
    return fit_name(f"{p.stack.name}-{p.name}-{p.uuid.replace('-', '')[:12]}")


class Value(Plugin):
    type_name = "OS::Heat::Value"
    properties_schema = {
        "value": Prop("any", required=True, update_allowed=True, description="The value."),
        "type": Prop("string", update_allowed=True,
                     allowed=("string", "number", "comma_delimited_list", "json", "boolean"),
                     description="The value's type (a parameter type)."),
    }
    attributes_schema = {"value": "The value of the `value` property."}

    def create(self) -> None:
        self.physical_id = physical_name(self)

    def attributes(self) -> dict:
        return {"value": self.properties.get("value")}


class NoneResource(Plugin):
    """Does nothing; any properties accepted, updates never replace."""

    type_name = "OS::Heat::None"
    update_any = True

    def create(self) -> None:
        self.physical_id = self.physical_id or self.uuid

    def needs_replace(self, changed: set[str], old_properties: dict) -> bool:
        return False

    @classmethod
    def resolve_attribute(cls, attrs: dict, name: str, path: list) -> Any:
        return None

_CLASSES = {
    "lettersdigits": string.ascii_letters + string.digits,
    "letters": string.ascii_letters,
    "lowercase": string.ascii_lowercase,
    "uppercase": string.ascii_uppercase,
    "digits": string.digits,
    "hexdigits": string.digits + "abcdef",
    "octdigits": string.octdigits,
}


def minimums_problem(classes: list, seqs: list, length: int) -> str | None:
    """Why the classes' and sequences' minimums cannot fit in `length` (each a whole number
    of 1 or more, at most the RandomString limit, as Heat's range 1 to 512), None if they fit."""
    total = 0
    for what, items in (("character_classes", classes), ("character_sequences", seqs)):
        for i, item in enumerate(items):
            n = item.get("min", 1) if isinstance(item, Mapping) else None
            if isinstance(n, bool) or not isinstance(n, int | str):
                return f"{what}[{i}].min: expected a whole number"
            try:
                n = int(n)
            except ValueError:
                return f"{what}[{i}].min: expected a whole number"
            why = bound_problem(1, "random_length", n)
            if why:
                return f"{what}[{i}].min: {why}"
            total += n
    if total > length:
        return (f"length ({length}) is smaller than the combined character class and sequence minimums "
                f"({total})")
    return None


class RandomString(Plugin):
    type_name = "OS::Heat::RandomString"
    properties_schema = {
        "length": Prop("integer", default=32, min=1, limit="random_length", description="Length of the string."),
        "sequence": Prop("string", allowed=tuple(_CLASSES), description="Deprecated: one character class."),
        "character_classes": Prop("list", description="[{class, min}] the string draws from."),
        "character_sequences": Prop("list", description="[{sequence, min}] the string draws from."),
        "salt": Prop("string", description="Change it to generate a new string."),
    }
    attributes_schema = {"value": "The random string (also what get_resource returns)."}
    secret_attributes = frozenset({"value"})

    @classmethod
    def validate_definition(cls, t: Any, rd: Any) -> None:
        """The properties, then the minimums of the classes and sequences against the length
        (when known: nothing is written for a string that cannot be made)."""
        if not t.check_values or not isinstance(rd.properties, Mapping) or rd.external_id is not None:
            validate_properties(t, rd)
            return
        resolved = placeholder_properties(t, rd)
        before = len(t.problems)
        validate_properties(t, rd, resolved)
        length = resolved.get("length", 32)
        if len(t.problems) == before and not has_unknown(resolved) and isinstance(length, int | str):
            why = minimums_problem(list(resolved.get("character_classes") or []),
                                   list(resolved.get("character_sequences") or []), int(length))
            if why:
                t.add(("resources", rd.name, "properties"), why)

    def create(self) -> None:
        if "value" in self.data:  # made by an interrupted earlier call: keep it
            return
        p = self.properties
        classes = list(p.get("character_classes") or [])
        if p.get("sequence"):
            classes.append({"class": p["sequence"], "min": 1})
        seqs = list(p.get("character_sequences") or [])
        if not classes and not seqs:
            classes = [{"class": "lettersdigits", "min": 1}]
        length = int(self.bounded("length"))
        why = minimums_problem(classes, seqs, length)
        if why:
            raise ResourceFailure(why)
        pools = [(_CLASSES.get(c.get("class", "lettersdigits"), _CLASSES["lettersdigits"]), int(c.get("min", 1)))
                 for c in classes] + [(s.get("sequence", ""), int(s.get("min", 1))) for s in seqs]
        pools = [(chars, n) for chars, n in pools if chars]
        chars = [secrets.choice(pool) for pool, n in pools for _ in range(n)]
        everything = "".join(pool for pool, _ in pools)
        chars += [secrets.choice(everything) for _ in range(length - len(chars))]
        secrets.SystemRandom().shuffle(chars)
        self.data["value"] = "".join(chars)
        self.physical_id = physical_name(self)

    def attributes(self) -> dict:
        return {"value": self.data.get("value")}

    def reference_id(self) -> str:
        return self.data.get("value") or self.name


class TestResource(Plugin):
    """Heat's test resource: stores `value`; can wait, fail, or force a replacement."""

    __test__ = False  # not a pytest class
    type_name = "OS::Heat::TestResource"
    properties_schema = {
        "value": Prop("string", default="test_string", update_allowed=True, description="The string stored."),
        "update_replace_value": Prop("string", description="A value that cannot be updated in place."),
        "fail": Prop("boolean", default=False, update_allowed=True,
                     description="Fail the create/update after the wait."),
        "update_replace": Prop("boolean", default=False, update_allowed=True,
                               description="A change of `value` replaces the resource."),
        "wait_secs": Prop("number", default=0, update_allowed=True, min=-1, limit="wait_seconds",
                          description="Seconds each action takes (-1: forever)."),
        "action_wait_secs": Prop("map", update_allowed=True, description="Seconds per action.",
                                 schema={a: Prop("number", update_allowed=True, min=-1, limit="wait_seconds")
                                         for a in ("create", "update", "delete")}),
        "client_name": Prop("string", default="", update_allowed=True, description="Ignored here."),
        "entity_name": Prop("string", default="", update_allowed=True, description="Ignored here."),
        "constraint_prop_secs": Prop("number", default=0, description="Ignored here."),
        "attr_wait_secs": Prop("number", default=0, description="Ignored here (attributes are stored)."),
    }
    attributes_schema = {"output": "The string stored."}
    poll_interval = 0.2

    def _wait(self, action: str) -> float:
        per = (self.properties.get("action_wait_secs") or {}).get(action.lower())
        return float(per if per is not None else self.properties.get("wait_secs") or 0)

    def _start(self, action: str) -> None:
        # The start time is kept in data: after a restart the wait continues, not restarts.
        self.data["started"] = time.time()
        self.data["wait"] = self._wait(action)

    def create(self) -> None:
        if "started" in self.data:
            return
        if not self.properties.get("fail"):
            self.data["value"] = self.properties.get("value")
            self.physical_id = physical_name(self)
        self._start("CREATE")

    def update(self, old_properties: dict) -> None:
        # Converge to the new value even when old_properties already hold it: a failed or
        # cancelled update may have changed the stored value without completing.
        if not self.properties.get("fail"):
            self.data["value"] = self.properties.get("value")
        if self.properties.get("value") != old_properties.get("value"):
            self._start("UPDATE")
        else:
            self.data["started"], self.data["wait"] = time.time(), 0

    def delete(self) -> None:
        self._start("DELETE")

    def needs_replace(self, changed: set[str], old_properties: dict) -> bool:
        return "value" in changed and bool(self.properties.get("update_replace"))

    def check_complete(self, action: str) -> bool:
        wait = self.data.get("wait", 0)
        if wait < 0 or time.time() - self.data.get("started", 0) < wait:
            return False
        if self.properties.get("fail") and action != "DELETE":
            raise ResourceFailure(f"Test Resource failed {self.name}")
        return True

    def waiting_for(self, action: str) -> str:
        return f"TestResource {self.name} to finish its {action.lower()} wait of {self.data.get('wait', 0):g} s"

    def attributes(self) -> dict:
        return {"output": self.data.get("value")}


class SoftwareConfig(Plugin):
    """A piece of configuration (script, puppet, ansible, ...) that deployments apply."""

    type_name = "OS::Heat::SoftwareConfig"
    properties_schema = {
        "group": Prop("string", default="Heat::Ungrouped", description="The hook that applies it."),
        "config": Prop("any", description="The configuration itself."),
        "options": Prop("map", description="Options for the hook."),
        "inputs": Prop("list", description="Inputs the config expects."),
        "outputs": Prop("list", description="Outputs the config produces."),
    }
    attributes_schema = {"config": "The configuration."}

    def create(self) -> None:
        self.physical_id = self.uuid

    def config(self) -> dict:
        """The config as software deployments hand it to the agent."""
        p = self.properties
        return {"id": self.uuid, "name": physical_name(self), "group": p.get("group") or "Heat::Ungrouped",
                "config": p.get("config"), "options": p.get("options") or {},
                "inputs": p.get("inputs") or [], "outputs": p.get("outputs") or []}

    def attributes(self) -> dict:
        return {"config": self.properties.get("config"), "software_config": self.config()}


class StructuredConfig(SoftwareConfig):
    """A SoftwareConfig whose `config` is a map (get_input resolved by the deployment)."""

    type_name = "OS::Heat::StructuredConfig"
    properties_schema = {**SoftwareConfig.properties_schema,
                         "config": Prop("map", description="The configuration (a map).")}


class WaitConditionHandle(Plugin):
    """Receives signals ({status, reason, data, id}) through the API; a WaitCondition counts them."""

    type_name = "OS::Heat::WaitConditionHandle"
    properties_schema = {
        "signal_transport": Prop("string", default="TOKEN_SIGNAL", description="Only TOKEN_SIGNAL here."),
    }
    attributes_schema = {
        "token": "The token to present with a signal.",
        "endpoint": "The URL to POST a signal to.",
        "curl_cli": "A curl command line that sends a signal (append --data-binary '{...}').",
        "signal": "Same as curl_cli minus the command: the URL and token.",
    }
    secret_attributes = frozenset({"token", "curl_cli", "signal"})

    def create(self) -> None:
        self.physical_id = self.uuid
        self.data.setdefault("token", secrets.token_urlsafe(24))
        self.data.setdefault("signals", [])

    def signal(self, payload: dict) -> None:
        if not isinstance(payload, dict):
            payload = {"data": payload}
        status = str(payload.get("status", "SUCCESS")).upper()
        if status not in ("SUCCESS", "FAILURE"):
            raise ResourceFailure(f"signal status must be SUCCESS or FAILURE, not {status}")
        sigs = self.data.setdefault("signals", [])
        sig_id = str(payload.get("id") or len(sigs) + 1)
        sigs[:] = [s for s in sigs if s["id"] != sig_id]  # a repeated id replaces the earlier one
        sigs.append({"id": sig_id, "status": status, "reason": payload.get("reason") or "Signal " + sig_id,
                     "data": payload.get("data")})

    def attributes(self) -> dict:
        base = self.services.api_url
        url = f"{base}/v1/stacks/{self.stack.id}/resources/{self.name}/signal"
        token = self.data.get("token", "")
        return {"token": token, "endpoint": url,
                "curl_cli": f"curl -i -X POST -H 'X-Signal-Token: {token}' -H 'Content-Type: application/json' {url}",
                "signal": {"url": url, "token": token}}


class WaitCondition(Plugin):
    """Completes when its handle got `count` SUCCESS signals; fails on a FAILURE or timeout."""

    type_name = "OS::Heat::WaitCondition"
    properties_schema = {
        "handle": Prop("string", required=True, description="get_resource of a WaitConditionHandle."),
        "timeout": Prop("number", required=True, min=1, limit="wait_seconds",
                        description="Seconds to wait for the signals."),
        "count": Prop("integer", default=1, update_allowed=True, min=1, limit="group_count",
                      description="Signals needed."),
    }
    attributes_schema = {"data": "JSON of {signal id: data}."}
    poll_interval = 0.2

    def create(self) -> None:
        self.physical_id = self.uuid
        self.data.setdefault("started", time.time())

    def update(self, old_properties: dict) -> None:
        self.data["started"] = time.time()

    def _signals(self) -> list[dict]:
        handle = self.find_peer(str(self.properties.get("handle")))
        if handle is None:
            raise ResourceFailure(f"handle {self.properties.get('handle')!r} is not a WaitConditionHandle here")
        return list(handle.data.get("signals", []))

    def check_complete(self, action: str) -> bool:
        if action == "DELETE":
            return True
        sigs = self._signals()
        failed = [s for s in sigs if s["status"] == "FAILURE"]
        if failed:
            raise ResourceFailure(f"WaitCondition signalled FAILURE: {failed[0]['reason']}")
        if len(sigs) >= int(self.properties.get("count") or 1):
            self.data["signals"] = sigs
            return True
        if time.time() - self.data.get("started", time.time()) > float(self.properties.get("timeout") or 0):
            raise ResourceFailure(f"timed out after {self.properties.get('timeout')} s waiting for "
                                  f"{self.properties.get('count') or 1} signal(s), got {len(sigs)}")
        return False

    def waiting_for(self, action: str) -> str:
        return f"{self.properties.get('count') or 1} signal(s) on wait condition handle"

    def attributes(self) -> dict:
        import json

        return {"data": json.dumps({s["id"]: s["data"] for s in self.data.get("signals", [])})}
