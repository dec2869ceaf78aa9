"""Helpers for the service template tests: render a library template with test values, read
an ini config, load an element's script as a module."""

from __future__ import annotations

import configparser
import importlib.machinery
import importlib.util
from pathlib import Path

import yaml

from undercloud.orchestration.template import Bundle, load
from undercloud.orchestration.template.evaluation import PlaceholderResolver

OVERCLOUD = Path(__file__).resolve().parents[2] / "undercloud" / "overcloud"
SERVICES = OVERCLOUD / "services"


def render(name: str, given: dict, image: str, environments: tuple[Path, ...] = ()) -> tuple[dict, dict, dict]:
    """(config files, Pod, role_data declarations) of services/NAME.yaml with the `given`
    parameters it takes (every Container*Image parameter set to `image`)."""
    path = SERVICES / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    values = {**given, **{p: image for p in doc["parameters"] if p.startswith("Container")}}
    t = load(Bundle.from_paths(str(path), [str(e) for e in environments]),
             {k: v for k, v in values.items() if k in doc["parameters"]})
    files = t.resolve(t.resources["ConfigFiles"].properties, PlaceholderResolver())["value"]
    pod = t.resolve(t.resources["Pod"].properties, PlaceholderResolver())["value"]
    return files, pod, doc["outputs"]["role_data"]["value"]


def ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


def script_module(path: Path):
    """An element's script (no .py suffix) imported as a module, for its functions."""
    loader = importlib.machinery.SourceFileLoader(path.name.replace("-", "_"), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
