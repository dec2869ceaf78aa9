"""Elements, in the spirit of diskimage-builder: a directory per element.

    element-deps        names of other elements it needs, one per line (# comments)
    package-installs    Debian packages to install, one per line (# comments)
    static/             files copied into the image root as they are
    root.d/             scripts run OUTSIDE the image, $TARGET_ROOT = the image root
    pre-install.d/      scripts run inside the image before packages are installed
    extra-data.d/       scripts run OUTSIDE the image after packages ($TARGET_ROOT)
    install.d/ post-install.d/ finalise.d/   scripts run inside the image, in this order

Within a phase the scripts of all elements run together, sorted by file name (as DIB
does), so `10-x` of one element runs before `50-y` of another. Scripts must be executable.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from undercloud.errors import InvalidInput

SHIPPED = Path(__file__).resolve().parent / "elements"
# Phases whose scripts change what packages see: they belong to the cached package stage.
PACKAGE_PHASES = ("root.d", "pre-install.d")
IMAGE_PHASES = ("extra-data.d", "install.d", "post-install.d", "finalise.d")
PHASES = PACKAGE_PHASES + IMAGE_PHASES
OUTSIDE = ("root.d", "extra-data.d")  # run on the host, not in the chroot
PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.\-]+(:[a-z0-9]+)?$")
KNOWN = {"element-deps", "package-installs", "static", "README", "README.md", *PHASES}


@dataclass
class Element:
    name: str
    path: Path
    deps: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)

    def scripts(self, phase: str) -> list[Path]:
        d = self.path / phase
        return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []

    def digest(self, parts: tuple[str, ...] | None = None) -> str:
        """sha256 over the element's files (names, executable bits, contents)."""
        h = hashlib.sha256(self.name.encode())
        for p in sorted(self.path.rglob("*")):
            rel = p.relative_to(self.path)
            if parts is not None and rel.parts[0] not in parts:
                continue
            if "__pycache__" in rel.parts:
                continue
            h.update(b"\0" + str(rel).encode())
            if p.is_symlink():
                h.update(b"L" + os.readlink(p).encode())
            elif p.is_file():
                h.update(b"X" if os.access(p, os.X_OK) else b"F")
                h.update(p.read_bytes())
        return h.hexdigest()


def _lines(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            out.append((n, line))
    return out


def load(name: str, search: list[Path], where: str) -> Element:
    for base in search:
        path = base / name
        if path.is_dir():
            return _parse(name, path)
    raise InvalidInput(f"element {name!r} not found in {', '.join(str(s) for s in search)}", where)


def _parse(name: str, path: Path) -> Element:
    el = Element(name, path)
    deps = path / "element-deps"
    if deps.is_file():
        for n, dep in _lines(deps):
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", dep):
                raise InvalidInput(f"not an element name: {dep!r}", f"{deps}:{n}")
            el.deps.append(dep)
    pkgs = path / "package-installs"
    if pkgs.is_file():
        for n, pkg in _lines(pkgs):
            if not PACKAGE_RE.match(pkg):
                raise InvalidInput(f"not a Debian package name: {pkg!r}", f"{pkgs}:{n}")
            el.packages.append(pkg)
    for phase in PHASES:
        for script in el.scripts(phase):
            if not os.access(script, os.X_OK):
                raise InvalidInput("phase script is not executable (chmod +x)", str(script))
    return el


def resolve(names: list[str] | tuple[str, ...], extra_paths: tuple[Path, ...] = ()) -> list[Element]:
    """The elements asked for plus their dependencies, dependencies first, each once."""
    search = [Path(p).resolve() for p in extra_paths] + [SHIPPED]
    order: list[Element] = []
    seen: dict[str, Element] = {}

    def visit(name: str, where: str, stack: tuple[str, ...]) -> None:
        if name in seen:
            return
        if name in stack:  # a cycle: DIB allows it, each element still counts once
            return
        el = load(name, search, where)
        deps_file = el.path / "element-deps"
        for n, dep in (_lines(deps_file) if deps_file.is_file() else []):
            visit(dep, f"{deps_file}:{n}", stack + (name,))
        if name not in seen:
            seen[name] = el
            order.append(el)

    for n in names:
        visit(n, "--element", ())
    return order


def phase_scripts(elements: list[Element], phase: str) -> list[tuple[Element, Path]]:
    """All scripts of a phase across elements, sorted by script name then element."""
    found = [(s.name, el.name, el, s) for el in elements for s in el.scripts(phase)]
    return [(el, s) for _, _, el, s in sorted(found, key=lambda t: (t[0], t[1]))]


def packages(elements: list[Element]) -> dict[str, str]:
    """package -> the element that asked for it (first one)."""
    out: dict[str, str] = {}
    for el in elements:
        for p in el.packages:
            out.setdefault(p, el.name)
    return out
