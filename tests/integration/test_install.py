"""Installing Undercloud: the wheel carries everything (a new venv gets a working `undercloud`
with its image elements, overcloud library and agent), and scripts/install-deps with a stock
Debian root's PATH installs a venv, links `undercloud`, does nothing the second time and
removes what it made. Both fetch the pinned dependencies from PyPI (pip's cache helps)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, need_root
from undercloud import __version__

STOCK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DATA_TREES = ("images/elements", "overcloud", "agent")  # what a node image and a deploy need


def stock_env(**extra) -> dict:
    """What a fresh Debian root sees: no pyenv, no venv on the PATH."""
    return {"HOME": os.environ["HOME"], "PATH": STOCK_PATH, **extra}


def files_under(root: Path) -> dict[str, bool]:
    """Relative path -> executable, of the package's files (no bytecode)."""
    return {str(p.relative_to(root)): os.access(p, os.X_OK) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-3000:]}"
    return r


def venv_python() -> str:
    """Debian's python3 when it can make venvs (as operators use), else this one."""
    ok = Path("/usr/bin/python3").exists() and subprocess.run(
        ["/usr/bin/python3", "-c", "import ensurepip, venv"], capture_output=True).returncode == 0
    return "/usr/bin/python3" if ok else sys.executable


def test_wheel_in_a_new_venv_is_a_working_undercloud(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src)
    shutil.copytree(REPO / "undercloud", src / "undercloud", ignore=shutil.ignore_patterns("__pycache__"))
    pins = {"PIP_CONSTRAINT": str(REPO / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
        env={**os.environ, **pins})
    wheel = next((tmp_path / "dist").glob("undercloud-*.whl"))

    venv = tmp_path / "venv"
    run([venv_python(), "-m", "venv", str(venv)], env=stock_env())
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], env=stock_env(**pins))

    # Run from elsewhere, so nothing of this checkout can be imported by accident.
    out = run([str(venv / "bin" / "undercloud"), "--version"], cwd=tmp_path, env=stock_env()).stdout
    assert out.strip() == f"undercloud, version {__version__}"
    pkg = Path(run([str(venv / "bin" / "python"), "-c", "import undercloud; print(undercloud.__file__)"],
                   cwd=tmp_path, env=stock_env()).stdout.strip()).parent
    assert pkg.is_relative_to(venv), pkg

    for tree in DATA_TREES:  # every file, whatever its type, with its executable bit
        shipped, installed = files_under(REPO / "undercloud" / tree), files_under(pkg / tree)
        assert shipped and installed == shipped, (tree, set(shipped) ^ set(installed))

    services = sorted((pkg / "overcloud" / "services").glob("*.yaml"))
    assert services
    for template in services:
        r = subprocess.run([str(venv / "bin" / "undercloud"), "template", "validate", "-t", str(template)],
                           capture_output=True, text=True, cwd=tmp_path, env=stock_env(), timeout=120)
        assert r.returncode == 0, f"{template.name}: {r.stdout}{r.stderr}"


def test_install_deps_with_a_stock_path_installs_once_and_removes(tmp_path):
    need_root()  # it may install Debian packages
    # A snapshot of the checkout: others may edit this one meanwhile (a change reinstalls).
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "constraints.txt", "scripts/install-deps"):
        shutil.copy2(REPO / name, checkout / name)
    shutil.copytree(REPO / "undercloud", checkout / "undercloud", ignore=shutil.ignore_patterns("__pycache__"))
    venv, bin_dir = tmp_path / "venv", tmp_path / "bin"
    env = stock_env(UNDERCLOUD_VENV=str(venv), UNDERCLOUD_BIN_DIR=str(bin_dir))
    script = str(checkout / "scripts" / "install-deps")

    run([script], env=env)
    assert os.readlink(bin_dir / "undercloud") == str(venv / "bin" / "undercloud")
    out = run([str(bin_dir / "undercloud"), "--version"], cwd=tmp_path, env=env).stdout
    assert out.strip() == f"undercloud, version {__version__}"
    for tool in ("openstack", "os-collect-config", "os-apply-config", "os-refresh-config", "dib-run-parts",
                 "pytest", "ruff"):  # what the tests drive
        assert os.access(venv / "bin" / tool, os.X_OK), tool

    start = time.monotonic()
    r = run([script], env=env)
    took = time.monotonic() - start
    assert "nothing to do" in r.stderr and took < 5, (took, r.stderr)

    # A changed checkout reinstalls Undercloud alone (not its dependencies).
    readme = checkout / "undercloud" / "images" / "elements" / "base" / "README.md"
    readme.write_text(readme.read_text() + "\nchanged\n")
    r = run([script], env=env)
    assert "installing Undercloud from" in r.stderr and "dependencies" not in r.stderr, r.stderr
    pkg = next(venv.glob("lib/python3*/site-packages/undercloud"))
    assert (pkg / "images" / "elements" / "base" / "README.md").read_text().endswith("\nchanged\n")

    # A new dependency (pinned) is installed; a package an older lock installed and nothing
    # needs or pins is dropped; the pinned ones stay.
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", "toml==0.10.2"], env=env)
    pyproject = checkout / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('dependencies = [', 'dependencies = [\n  "tomli-w",', 1))
    with open(checkout / "constraints.txt", "a") as f:
        f.write("tomli_w==1.2.0\n")
    r = run([script], env=env)
    assert "dependencies" in r.stderr, r.stderr
    installed = run([python, "-m", "pip", "list", "--format=freeze"], env=env).stdout.lower()
    assert "tomli_w==1.2.0" in installed.replace("-", "_") and "toml==" not in installed, installed
    assert "pyyaml==" in installed and "openstackclient==" in installed, installed

    r = run([script, "--remove"], env=env)
    assert not venv.exists() and not (bin_dir / "undercloud").is_symlink(), r.stderr
