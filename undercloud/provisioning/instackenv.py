"""TripleO's node inventory (`instackenv.json`, or the same in YAML) -> node specs.

Everything is checked before anything is written: unknown fields, missing BMC fields,
bad values, and duplicates inside the file (name, MAC, BMC address+port+system). Each
problem is one line `FILE:LINE: nodes[i] (NAME): FIELD: message`; all problems are
reported together.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from undercloud import yamldata
from undercloud.errors import InvalidInput
from undercloud.names import check_name
from undercloud.provisioning import drivers

NODE_FIELDS = {
    "name", "uuid", "pm_type", "pm_addr", "pm_user", "pm_password", "pm_port", "pm_system_id",
    "redfish_verify_ca", "ports", "mac", "cpu", "memory", "disk", "arch", "capabilities",
    "root_device", "resource_class", "hypervisor_type", "boot_interface",
    "fake_delay", "fake_fail",  # the fake driver's knobs (tests, benchmarks)
    "cloud", "server",  # pm_type openstack: a server of a cloud of `undercloud cloud add`
}
TOP_FIELDS = {"nodes"}
PORT_FIELDS = {"address", "physical_network", "local_link_connection"}
MAC = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")


@dataclass
class NodeSpec:
    name: str | None
    uuid: str
    driver: str
    driver_info: dict
    bmc_key: str
    properties: dict
    resource_class: str | None
    macs: list[str] = field(default_factory=list)
    line: int = 0
    where: str = ""


class _Lines:
    """Line numbers of the document, by path ("nodes", 0, "pm_addr"), as the YAML reader kept
    them (an alias bomb is refused there, never walked here)."""

    def __init__(self, doc: Any):
        self.doc = doc

    def __call__(self, *path) -> int:
        return yamldata.line_of(self.doc, path) or 1


_LIMIT = "(set UNDERCLOUD_"  # how the reader's refusals for a limit end


def load(text: str, filename: str) -> tuple[Any, _Lines]:
    """The inventory's data and its line numbers, or InvalidInput in one line."""
    try:
        if filename.endswith(".json") or text.lstrip().startswith("{"):
            data = json.loads(text)
            try:
                doc = yamldata.read(text)  # JSON is YAML: for the lines, and the same depth limit
            except yaml.YAMLError as exc:
                if _LIMIT in str(getattr(exc, "problem", "")):
                    raise
                doc = None  # JSON that YAML 1.1 reads otherwise (e.g. a "\/" escape): lines unknown
            return data, _Lines(doc)
        data = yamldata.read(text)  # the templates' reader: aliases counted, never expanded
        return data, _Lines(data)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON: {exc.msg}", f"{filename}:{exc.lineno}") from None
    except RecursionError:
        raise InvalidInput("data nests too deeply to be read", filename) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        if _LIMIT not in problem:  # a limit names itself; anything else is bad YAML
            problem = f"not valid YAML: {problem}"
        raise InvalidInput(problem, f"{filename}:{line}") from None


def parse(text: str, filename: str = "instackenv.json") -> list[NodeSpec]:
    """The node specs of an inventory, or InvalidInput listing every problem (one line each)."""
    data, lines = load(text, filename)
    problems: list[str] = []

    def bad(path: tuple, label: str, message: str) -> None:
        problems.append(f"{filename}:{lines(*path)}: {label}: {message}")

    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InvalidInput("expected a mapping with a `nodes` list", f"{filename}:1")
    for key in data:
        if key not in TOP_FIELDS:
            bad((key,), str(key), "unknown field (known: nodes)")

    specs: list[NodeSpec] = []
    seen_names: dict[str, str] = {}
    seen_macs: dict[str, str] = {}
    seen_bmcs: dict[str, str] = {}
    for i, entry in enumerate(data["nodes"]):
        path = ("nodes", i)
        if not isinstance(entry, dict):
            bad(path, f"nodes[{i}]", "expected a mapping")
            continue
        label = f"nodes[{i}]" + (f" ({str(entry['name'])[:64]})" if entry.get("name") else "")
        before = len(problems)
        for key in entry:
            if key not in NODE_FIELDS:
                bad(path + (key,), label, f"{key}: unknown field")
        pm_type = str(entry.get("pm_type") or "ipmi")
        try:
            mod = drivers.module(pm_type)
        except InvalidInput as exc:
            bad(path + ("pm_type",), label, f"pm_type: {exc.message}")
            continue
        for key in mod.required():
            if entry.get(key) in (None, ""):
                bad(path, label, f"{key}: required for pm_type {pm_type}")
        props, macs = _properties(entry, path, label, bad)
        missing = [k for k in mod.required() if entry.get(k) in (None, "")]
        if len(str(entry.get("pm_addr") or "")) > 400:
            bad(path + ("pm_addr",), label, "pm_addr: longer than 400 characters")
            continue
        try:
            info = {} if missing else mod.from_instackenv(entry)
            if "://" in str(info.get("address", "")):
                _ = urlsplit(info["address"]).port  # a bad port or IPv6 literal raises here, not at the BMC
        except (ValueError, TypeError) as exc:  # e.g. urlsplit of "http://[::1": no secrets in its words
            bad(path + ("pm_addr",), label,
                f"pm_addr/pm_port: not a BMC address: {exc if isinstance(exc, ValueError) else 'wrong type'}")
            continue
        boot = entry.get("boot_interface")
        if boot is not None:
            if boot not in mod.DRIVER.boot_interfaces:
                bad(path + ("boot_interface",), label, f"boot_interface: {boot!r} is not one of pm_type {pm_type}'s "
                                                       f"({', '.join(mod.DRIVER.boot_interfaces)})")
            else:
                info["boot_interface"] = boot
        if mod is drivers.module("fake"):
            info.update({k: v for k, v in (("delay", entry.get("fake_delay")), ("fail", entry.get("fake_fail")))
                         if v is not None})
        key = mod.bmc_key(info) if not missing else None
        name = entry.get("name")
        node_uuid = str(entry.get("uuid") or uuid.uuid4())
        try:
            node_uuid = str(uuid.UUID(node_uuid[:64]))
        except ValueError:
            bad(path + ("uuid",), label, "uuid: not a UUID")
        # duplicates are checked even for entries with other problems: report everything at once
        if name is not None:
            name = str(name)
            try:
                check_name(name, "node")
            except InvalidInput as exc:
                bad(path + ("name",), label, f"name: {exc.message}")
            if name in seen_names:
                bad(path + ("name",), label, f"name: duplicate of {seen_names[name]}")
            seen_names.setdefault(name, label)
        for mac in macs:
            if mac in seen_macs:
                bad(path + ("ports",), label, f"ports: MAC {mac} duplicate of {seen_macs[mac]}")
            seen_macs.setdefault(mac, label)
        if key is not None:
            if key in seen_bmcs:
                bad(path + ("pm_addr",), label, f"pm_addr: same BMC ({_bmc_text(info)}) as {seen_bmcs[key]}")
            seen_bmcs.setdefault(key, label)
        if len(problems) > before:
            continue
        specs.append(NodeSpec(
            name=name, uuid=node_uuid, driver=drivers.canonical(pm_type), driver_info=info, bmc_key=key,
            properties=props, resource_class=entry.get("resource_class") or "baremetal", macs=macs,
            line=lines(*path), where=f"{filename}:{lines(*path)}: {label}",
        ))
    if problems:
        raise InvalidInput("\n".join(problems) + f"\n{len(problems)} problem(s); nothing was imported")
    return specs


def _bmc_text(info: dict) -> str:
    return " ".join(str(info[k]) for k in ("address", "port", "system_id") if info.get(k))


def _properties(entry: dict, path: tuple, label: str, bad) -> tuple[dict, list[str]]:
    props: dict[str, Any] = {}
    for src, dst in (("cpu", "cpus"), ("memory", "memory_mb"), ("disk", "local_gb")):
        if entry.get(src) is not None:
            try:
                value = int(entry[src])
                if value < 0:
                    raise ValueError
                props[dst] = value
            except (TypeError, ValueError):
                bad(path + (src,), label, f"{src}: expected a non-negative integer, got {entry[src]!r}")
    if entry.get("arch"):
        props["cpu_arch"] = str(entry["arch"])
    if entry.get("hypervisor_type"):
        props["hypervisor_type"] = str(entry["hypervisor_type"])
    caps = entry.get("capabilities")
    if caps is not None:
        parsed = parse_capabilities(caps)
        if parsed is None:
            bad(path + ("capabilities",), label, "capabilities: expected 'key:value,...' or a mapping")
        elif parsed.get("boot_mode", "bios") not in drivers.BOOT_MODES:
            bad(path + ("capabilities",), label, f"capabilities: unknown boot_mode {parsed['boot_mode']!r} "
                                                 f"({' or '.join(drivers.BOOT_MODES)})")
        else:
            props["capabilities"] = parsed
    if entry.get("root_device") is not None:
        if isinstance(entry["root_device"], dict):
            props["root_device"] = entry["root_device"]
        else:
            bad(path + ("root_device",), label, "root_device: expected a mapping of hints (e.g. serial, size)")
    macs: list[str] = []
    raw = entry.get("mac") or []
    if not isinstance(raw, list):
        raw = [raw]
    ports = entry.get("ports") or []
    if not isinstance(ports, list):
        bad(path + ("ports",), label, "ports: expected a list of {address: MAC}")
        ports = []
    for j, port in enumerate(ports):
        if not isinstance(port, dict) or "address" not in port:
            bad(path + ("ports", j), label, f"ports[{j}]: expected {{address: MAC}}")
            continue
        for key in port:
            if key not in PORT_FIELDS:
                bad(path + ("ports", j, key), label, f"ports[{j}].{key}: unknown field")
        raw.append(port["address"])
    for mac in raw:
        mac_s = str(mac).strip().lower()
        if not MAC.match(mac_s):
            bad(path + ("ports",), label, f"ports: {mac!r} is not a MAC address")
        elif mac_s in macs:
            bad(path + ("ports",), label, f"ports: MAC {mac_s} listed twice")
        else:
            macs.append(mac_s)
    return props, macs


def parse_capabilities(caps: Any) -> dict[str, str] | None:
    """'profile:control,boot_option:local' or a mapping -> {'profile': 'control', ...}."""
    if isinstance(caps, dict):
        return {str(k): str(v) for k, v in caps.items()}
    if isinstance(caps, str):
        out = {}
        for part in filter(None, (p.strip() for p in caps.split(","))):
            if ":" not in part:
                return None
            k, v = part.split(":", 1)
            out[k.strip()] = v.strip()
        return out
    return None
