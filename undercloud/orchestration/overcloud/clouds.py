"""The clouds.yaml of an overcloud: its admin credentials, for the real OpenStack client."""

from __future__ import annotations

from pathlib import Path

import yaml

from undercloud.errors import InvalidInput
from undercloud.orchestration.overcloud.secrets import load_secrets, stack_dir, write_private


def clouds_yaml(stack: str, auth_url: str, password: str, region: str = "RegionOne") -> str:
    return yaml.safe_dump({"clouds": {stack: {
        "auth": {"auth_url": auth_url, "username": "admin", "password": password, "project_name": "admin",
                 "user_domain_name": "Default", "project_domain_name": "Default"},
        "region_name": region, "identity_api_version": 3, "interface": "public"}}}, sort_keys=False)


def admin_password(home: Path, stack: str) -> str:
    password = load_secrets(home, stack).get("AdminPassword")
    if not password:
        raise InvalidInput(f"overcloud {stack} has no admin password (is keystone disabled?)", "clouds.yaml")
    return password


def write_clouds_yaml(home: Path, stack: str, auth_url: str) -> Path:
    path = stack_dir(home, stack) / "clouds.yaml"
    write_private(path, clouds_yaml(stack, auth_url, admin_password(home, stack)))
    return path
