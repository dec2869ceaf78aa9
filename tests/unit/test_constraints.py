"""constraints.txt locks what pyproject.toml asks for: a dependency added without
re-running scripts/lock, or a requirement its pin no longer meets, fails here."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

from packaging.requirements import Requirement

from tests.conftest import REPO

EXTRAS = ("test", "lab")  # what scripts/install-deps installs


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """The pins for this Python: a line with a marker (`; python_version >= "3.13"`, what
    scripts/lock adds for Debian 13's Python) counts where its marker holds."""
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            specs = list(req.specifier)
            assert len(specs) == 1 and specs[0].operator == "==", f"constraints.txt: not a pin: {line}"
            if req.marker is None or req.marker.evaluate():
                out[norm(req.name)] = specs[0].version
    return out


def direct() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    return [Requirement(r) for r in reqs]


def test_every_requirement_of_pyproject_is_pinned_to_a_version_it_accepts():
    pinned = pins()
    for req in direct():
        assert norm(req.name) in pinned, f"{req.name} is not in constraints.txt: run scripts/lock"
        assert req.specifier.contains(pinned[norm(req.name)], prereleases=True), \
            f"{req} does not accept the pinned {pinned[norm(req.name)]}: run scripts/lock"
    assert pinned.get("setuptools"), "setuptools (which builds our wheel and libvirt-python) is not pinned"


def test_dependencies_of_pinned_packages_are_pinned_too():
    """Followed through the installed packages whose version is the pinned one (all of them in
    the venv scripts/install-deps makes; another environment checks what it can)."""
    pinned = pins()
    seen, todo, checked = set(), [(r, ("",)) for r in direct()], 0
    while todo:
        req, extras = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = norm(req.name)
        assert name in pinned, f"{req.name} (needed by {req}) is not in constraints.txt: run scripts/lock"
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != pinned[name]:
            continue
        checked += 1
        todo += [(Requirement(r), tuple(req.extras) or ("",)) for r in dist.requires or []]
    assert checked, "no dependency is installed at its pinned version"
