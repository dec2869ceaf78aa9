"""OpenStack clouds known by name: the targets QuintupleO deploys onto (issue 15).

A cloud is its clouds.yaml entry (as `openstack --os-cloud` reads it), checked when it is
added: openstacksdk authenticates with it and its catalog must offer compute. Only then is
it stored (encrypted at rest, store/clouds.py). What is shown never holds a secret: every
value under a key that names a password, secret, token or key is masked.
"""

from __future__ import annotations

import logging
import re
import time

from sqlalchemy import select

from undercloud.errors import Conflict, InvalidInput, NotFound, UndercloudError
from undercloud.masking import mask_keys
from undercloud.names import check_name
from undercloud.store import Store
from undercloud.store.clouds import Cloud

log = logging.getLogger("undercloud.clouds")
SECRET_KEY = re.compile(r"password|secret|token|key$", re.I)
API_TIMEOUT = 20  # seconds per request to the cloud (an address that never answers)
SERVICES = ("compute", "image", "network")  # shown; compute is required


class CloudError(UndercloudError):
    """The cloud refused or could not be reached: nothing was stored."""


def masked(value):
    """`value` with every secret-named entry's value masked."""
    return mask_keys(value, SECRET_KEY.search)


def reason(exc: Exception) -> str:
    """One line from openstacksdk/keystoneauth's error (never the request's body)."""
    text = " ".join(str(exc).split())
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    status = getattr(exc, "status_code", None) or getattr(exc, "http_status", None)
    m = re.search(r"\(HTTP (\d{3})\)", text)  # openstacksdk's wrapping keeps it only in the text
    status = status or (int(m.group(1)) if m else None)
    if status in (401, 403):
        return f"authentication refused (HTTP {status})"
    if "timed out" in text.lower():
        return f"no answer within {API_TIMEOUT} s"
    return text[:200]


def call(error: type[Exception], where: str, what: str, fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, an openstacksdk call; a failure raised as `error` in one line,
    `where: what: reason` (ours pass through as they are)."""
    try:
        return fn(*args, **kwargs)
    except (error, UndercloudError):
        raise
    except Exception as exc:  # noqa: BLE001 - openstacksdk and keystoneauth raise many kinds
        raise error(f"{where}: {what}: {reason(exc)}") from None


def connect(name: str, config: dict):
    """An authenticated openstacksdk Connection to the cloud `config` describes."""
    import openstack  # heavy (~0.5 s): only when a cloud is used

    if not isinstance(config.get("auth"), dict) or not config["auth"].get("auth_url"):
        raise InvalidInput(f"cloud {name}: its entry has no auth.auth_url")
    try:
        conn = openstack.connect(load_yaml_config=False, load_envvars=False, api_timeout=API_TIMEOUT,
                                 **{k: v for k, v in config.items() if k != "api_timeout"})
        conn.authorize()
    except Exception as exc:  # noqa: BLE001 - openstacksdk and keystoneauth raise many kinds
        raise CloudError(f"cloud {name}: cannot authenticate at {config['auth']['auth_url']}: "
                         f"{reason(exc)}") from None
    return conn


def endpoints(conn) -> dict[str, str | None]:
    out = {}
    for service in SERVICES:
        try:
            out[service] = conn.endpoint_for(service)
        except Exception:  # noqa: BLE001 - not in the catalog
            out[service] = None
    return out


class Clouds:
    def __init__(self, store: Store):
        self.store = store

    def add(self, name: str, config: dict, source: str = "") -> dict:
        check_name(name, "cloud")
        if not isinstance(config, dict):
            raise InvalidInput(f"cloud {name}: its entry is not a map")
        with self.store.session() as s:
            if s.get(Cloud, name) is not None:
                raise Conflict(f"a cloud named {name!r} exists (`undercloud cloud remove {name}` first)", "name")
        found = endpoints(connect(name, config))
        if not found["compute"]:
            raise CloudError(f"cloud {name}: its catalog has no compute service (Nova) for this "
                             f"region and interface")
        with self.store.session() as s:
            if s.get(Cloud, name) is not None:  # added meanwhile
                raise Conflict(f"a cloud named {name!r} exists", "name")
            s.add(Cloud(name=name, config=config, source=source[:1024], created_at=time.time()))
        log.info("cloud %s added (%s)", name, source or "no source")
        return {**self._view(name, config, source), "endpoints": found}

    def list(self) -> list[dict]:
        with self.store.session() as s:
            return [self._view(c.name, c.config, c.source) for c in s.scalars(select(Cloud).order_by(Cloud.name))]

    def _row(self, name: str) -> Cloud:
        with self.store.session() as s:
            c = s.get(Cloud, name)
            if c is None:
                known = ", ".join(s.scalars(select(Cloud.name).order_by(Cloud.name))) or "none"
                raise NotFound(f"no cloud {name!r} (clouds: {known}; `undercloud cloud add`)", "cloud")
            return c

    def config(self, name: str) -> dict:
        """The stored entry, secrets included: for the code that talks to the cloud."""
        return self._row(name).config

    def get(self, name: str, check: bool = False) -> dict:
        """The cloud as shown (secrets masked); with `check`, authenticated again now and its
        endpoints listed."""
        c = self._row(name)
        out = self._view(name, c.config, c.source)
        if check:
            out["endpoints"] = endpoints(connect(name, c.config))
        return out

    def remove(self, name: str) -> dict:
        from undercloud.store.servers import Server

        with self.store.session() as s:
            c = s.get(Cloud, name)
            if c is None:
                raise NotFound(f"no cloud {name!r}", "cloud")
            used = s.scalars(select(Server.name).where(Server.hypervisor_type == f"openstack:{name}")
                             .order_by(Server.name)).all()
            if used:  # they could no longer be reached to delete them
                raise Conflict(f"cloud {name} has {len(used)} server(s) of this undercloud: "
                               f"{', '.join(used[:5])}{', ...' if len(used) > 5 else ''} (delete their stacks first)",
                               "cloud")
            s.delete(c)
        log.info("cloud %s removed", name)
        return {"name": name, "removed": True}

    @staticmethod
    def _view(name: str, config: dict, source: str) -> dict:
        auth = config.get("auth") or {}
        return {"name": name, "auth_url": auth.get("auth_url"), "username": auth.get("username"),
                "project_name": auth.get("project_name"), "region_name": config.get("region_name"),
                "source": source, "config": masked(config)}
