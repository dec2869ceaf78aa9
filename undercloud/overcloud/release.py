"""The OpenStack release an overcloud runs: `OvercloudRelease` in an environment.

Each release is the packages of one Debian suite (images/catalog.RELEASES): zed is Debian 12's,
2025.1 ("Epoxy") Debian 13's. A new overcloud runs what its environments say, else the
default; an overcloud keeps the release it was deployed with (kept in its deployed sets:
deployed.py) unless an environment names one. It is never moved to another in place:
upstream upgrades a database one release (or one SLURP release) at a time, and Debian ships
nothing between Zed and 2025.1, so a deploy that would change it is refused before anything
changes. The services read the parameter where their configuration differs between
releases, in their own template.
"""

from __future__ import annotations

from pathlib import Path

from undercloud.errors import InvalidInput
from undercloud.images.catalog import DEFAULT_RELEASE, RELEASES

PARAMETER = "OvercloudRelease"
BEFORE = "zed"  # what an overcloud deployed before releases were recorded runs


def given(environments: list[Path]) -> str | None:
    """OvercloudRelease as the environments set it (the last wins), checked; None when none does."""
    from undercloud.overcloud.secrets import secrets_given

    value = secrets_given(environments, {PARAMETER}).get(PARAMETER)
    if value is None:
        return None
    value = value.strip()
    if value not in RELEASES:
        raise InvalidInput(f"{value[:32]!r} is not a release this undercloud deploys: "
                           f"{' or '.join(RELEASES)}", PARAMETER)
    return value


def of_set(deployed_set: dict | None) -> str | None:
    """The release a deployed set runs; None for no set (no overcloud yet)."""
    if not deployed_set:
        return None
    return deployed_set.get("release") or BEFORE


def choose(stack: str, environments: list[Path], deployed_set: dict | None) -> str:
    """The release this deploy of `stack` runs (`deployed_set`: its current one, None for a
    new overcloud); one line when the environments would move it to another."""
    want, have = given(environments), of_set(deployed_set)
    if have and want and want != have:
        raise InvalidInput(f"overcloud {stack} runs OpenStack {have} and is not moved to {want} in place "
                           f"(upstream upgrades a database one release at a time; Debian has nothing "
                           f"between zed and 2025.1): deploy {want} as another overcloud, or delete "
                           f"{stack} first", PARAMETER)
    return want or have or DEFAULT_RELEASE
