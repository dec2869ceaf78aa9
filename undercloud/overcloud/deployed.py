"""The deployed sets of an overcloud: which service image each image parameter named at the
last successful deploy, update or rollback (`current`) and at the one before that changed
images (`previous`, what `overcloud rollback` returns to). Kept in the store beside the stack's
secrets (state.py, as `deployed-sets`); their images are kept in the image store (`keep`
of a registration).

A set: {"images": {param: {"name", "ref", "id", "services"}}, "overrides": {role: {param:
{"name", "ref", "id", "services"}}}, "hypervisor", "release", "at"}: `overrides` are the images one
role runs instead (`overcloud update --role`), as the `<Role>ImageOverrides` parameters
(the set's image reference -> the role's) say."""

from __future__ import annotations

import time
from typing import Any

from undercloud.server_types import CONTAINER

NAME = "deployed-sets"


def load(state) -> dict[str, Any]:
    """The sets kept in `state` (a state.StackState)."""
    data = state.get(NAME, {})
    return data if isinstance(data, dict) else {}


def make_set(library, records: dict[str, dict], hypervisor: str, release: str) -> dict[str, Any]:
    """The set a deploy of OpenStack `release` with these image records (name -> record) makes."""
    services: dict[str, list[str]] = {}
    for s in library.enabled:
        for param in s.images:
            if s.name and s.name not in services.setdefault(param, []):
                services[param].append(s.name)
    images = {}
    for param, name in sorted(library.images().items()):
        r = records[name]
        images[param] = {"name": name, "ref": r["properties"]["podman_image"], "id": r["id"],
                         "services": sorted(services.get(param, []))}
    return {"images": images, "hypervisor": hypervisor, "release": release, "at": time.time()}


def record(state, new: dict[str, Any]) -> None:
    """`new` is now current; the current set becomes previous when the images differ (a
    deploy that changed no image keeps the set to roll back to)."""
    data = load(state)
    cur = data.get("current")
    if cur and refs(cur) != refs(new):
        data["previous"] = cur
    data["current"] = new
    state.put(NAME, data)


def refs(s: dict[str, Any] | None) -> dict[str, str]:
    """param -> image reference, and "<role>:<param>" -> the one that role runs instead."""
    out = {p: i["ref"] for p, i in ((s or {}).get("images") or {}).items()}
    for role, over in sorted(((s or {}).get("overrides") or {}).items()):
        out.update({f"{role}:{p}": i["ref"] for p, i in over.items()})
    return out


def every_image(s: dict[str, Any]) -> list[dict[str, Any]]:
    """The set's images, the roles' own ones too."""
    return list(s["images"].values()) + [i for over in (s.get("overrides") or {}).values() for i in over.values()]


def parameters(s: dict[str, Any], params: list[str] | None = None, roles: list[str] = ()) -> dict[str, Any]:
    """Stack parameters naming the set's images (`params`: only those image parameters):
    the image parameters, the `<Role>ImageOverrides` of `roles` (empty for a role without
    one), and where VM and bare-metal nodes download them from."""
    chosen = {p: i for p, i in s["images"].items() if params is None or p in params}
    out: dict[str, Any] = {p: i["ref"] for p, i in chosen.items()}
    out.update(override_parameters({p: i["ref"] for p, i in s["images"].items()}, s.get("overrides") or {}, roles))
    if s.get("hypervisor", CONTAINER) != CONTAINER:
        out["ServiceImageSources"] = sources(every_image(s))
    return out


def override_parameters(image_refs: dict[str, Any], overrides: dict[str, Any], roles) -> dict[str, Any]:
    """`<Role>ImageOverrides` of `roles`: the set's image reference (`image_refs`: param ->
    reference) -> the one the role runs instead; empty for a role without one."""
    return {f"{role}ImageOverrides": {image_refs[p]: i["ref"] for p, i in (overrides.get(role) or {}).items()
                                      if p in image_refs} for role in roles}


def sources(images) -> dict[str, str]:
    """Image reference -> its download path in the image store (ServiceImageSources)."""
    return {i["ref"]: f"/v1/images/{i['id']}/file" for i in images}


def kept_overrides(current: dict[str, Any] | None, images: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """The current set's role images a deploy keeps: those of roles it still has, for image
    parameters that still name the image they were made over (`images`: the deploy's
    image parameters)."""
    out: dict[str, Any] = {}
    for role, over in ((current or {}).get("overrides") or {}).items():
        keep = {p: i for p, i in over.items() if role in roles and p in images
                and images[p] == (current["images"].get(p) or {}).get("ref")}
        if keep:
            out[role] = keep
    return out


def kept(every_stacks_sets) -> list[str]:
    """Every image (podman tag) a recorded set names: `every_stacks_sets` is each stack's
    kept sets (`GET /v1/overcloud-state?name=deployed-sets`)."""
    out: set[str] = set()
    for data in every_stacks_sets:
        if isinstance(data, dict):
            for s in (data.get("current"), data.get("previous")):
                out.update(refs(s).values())
    return sorted(out)
