"""The undercloud itself as the content of an image (the `undercloud-worker` element): the
package as it runs here and its Python dependencies at the versions installed here, under
/opt/undercloud/lib of the image (a .pth puts it on the image's python3 path).

The image's python3 is Debian's, the same minor version as the builder's (both bookworm):
the dependencies' wheels (compiled ones too) are installed by this Python's pip with
`--target`, pinned to what this environment runs, so the image's worker runs the code and
libraries this undercloud runs. `digest()` keys the image layer: the package's files and
those pins.

    python3 -m undercloud.images.payload TARGET_ROOT     # what the element's script runs
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from undercloud.errors import UndercloudError

PACKAGE = Path(__file__).resolve().parent.parent  # the `undercloud` package directory
LIB = "opt/undercloud/lib"
PTH = "usr/lib/python3/dist-packages/undercloud-worker.pth"


def requirements() -> list[str]:
    """The undercloud's own requirements (its extras, for tests and the lab, left out)."""
    try:
        reqs = metadata.requires("undercloud") or []
    except metadata.PackageNotFoundError:
        raise UndercloudError("the undercloud package is not installed in this Python: its requirements "
                              "are unknown (install it, e.g. scripts/install-deps)", "undercloud-worker") from None
    return [r for r in reqs if "extra ==" not in r.replace("extra==", "extra ==")]


def pins() -> list[str]:
    """name==version of every distribution installed in this Python (but the undercloud)."""
    out = set()
    for d in metadata.distributions():
        name = d.metadata["Name"]
        if name and re.sub(r"[-_.]+", "-", name).lower() != "undercloud":
            out.add(f"{name}=={d.version}")
    return sorted(out, key=str.lower)


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def digest() -> str:
    h = hashlib.sha256(f"payload {sys.version_info[:2]}".encode())
    for r in requirements() + pins():
        h.update(b"\0" + r.encode())
    for p in source_files():
        h.update(b"\0" + str(p.relative_to(PACKAGE)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def install(root: Path) -> None:
    lib = root / LIB
    shutil.rmtree(lib, ignore_errors=True)
    lib.mkdir(parents=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="uc-pins-") as constraints:
        constraints.write("\n".join(pins()) + "\n")
        constraints.flush()
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--no-compile", "--no-warn-script-location", "--only-binary", ":all:",
                        "--target", str(lib), "-c", constraints.name, *requirements()], check=True)
    shutil.rmtree(lib / "bin", ignore_errors=True)  # the dependencies' scripts: the worker runs none
    dest = lib / "undercloud"
    for p in source_files():
        target = dest / p.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(p, target)
    pth = root / PTH
    pth.parent.mkdir(parents=True, exist_ok=True)
    pth.write_text(f"/{LIB}\n")
    launcher = root / "usr/local/bin/undercloud"
    launcher.parent.mkdir(parents=True, exist_ok=True)
    launcher.write_text("#!/usr/bin/python3\nfrom undercloud.cli.main import main\n\nmain()\n")
    os.chmod(launcher, 0o755)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 -m undercloud.images.payload TARGET_ROOT")
    try:
        install(Path(sys.argv[1]))
    except (UndercloudError, subprocess.CalledProcessError, OSError) as exc:
        raise SystemExit(f"payload: {exc}") from None
