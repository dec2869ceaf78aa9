"""The clouds.yaml of an overcloud: its admin credentials, for the real OpenStack client."""

from __future__ import annotations

from pathlib import Path

import yaml

from undercloud.agent.files import write_atomic
from undercloud.errors import InvalidInput
from undercloud.overcloud.secrets import stack_dir


def clouds_yaml(stack: str, auth_url: str, password: str, region: str = "RegionOne",
                cacert: str | None = None) -> str:
    """The cloud `stack`: its public endpoints, verified with `cacert` (the CA of the public
    certificate; none: the system's trust store) where they are https."""
    entry = {"auth": {"auth_url": auth_url, "username": "admin", "password": password, "project_name": "admin",
                      "user_domain_name": "Default", "project_domain_name": "Default"},
             "region_name": region, "identity_api_version": 3, "interface": "public"}
    if cacert and auth_url.startswith("https:"):
        entry["cacert"] = cacert
    return yaml.safe_dump({"clouds": {stack: entry}}, sort_keys=False)


def admin_password(secrets: dict, stack: str) -> str:
    """The admin password among the stack's kept `secrets` (state.StackState.secrets())."""
    password = secrets.get("AdminPassword")
    if not password:
        raise InvalidInput(f"overcloud {stack} has no admin password (is keystone disabled?)", "clouds.yaml")
    return password


def write_clouds_yaml(home: Path, stack: str, auth_url: str, secrets: dict, cacert: str | None = None) -> Path:
    path = stack_dir(home, stack) / "clouds.yaml"
    write_atomic(path, clouds_yaml(stack, auth_url, admin_password(secrets, stack), cacert=cacert))
    return path
