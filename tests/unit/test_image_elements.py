"""Elements: loading, dependencies, phase order, errors with file:line, content keys that
change exactly for what depends on a change; and the uc-start service start script."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from undercloud.errors import InvalidInput
from undercloud.images import catalog, elements
from undercloud.images.build import Builder

UC_START = elements.SHIPPED / "service-base" / "static" / "usr" / "local" / "bin" / "uc-start"


def element(root: Path, name: str, files: dict[str, str]) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for rel, text in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if ".d/" in rel:
            p.chmod(0o755)
    return d


def keys(target, paths=()) -> dict[str, str]:
    return Builder(target.with_elements_path(tuple(paths)), lambda _m: None, Path("/tmp"), False).keys


def test_shipped_elements_resolve_with_deps_first():
    names = [e.name for e in elements.resolve(["deploy-ramdisk", "agent", "base"])]
    assert names.index("kernel") < names.index("deploy-ramdisk")
    assert sorted(names) == ["agent", "base", "deploy-ramdisk", "kernel"] and len(set(names)) == len(names)
    from undercloud.overcloud.library import library_images

    shipped = catalog.default_targets(library_images())
    assert {"service-keystone", "service-mariadb", "overcloud-full"} <= {t.name for t in shipped}
    for t in shipped:  # every shipped image resolves and plans
        assert len(keys(t)["output"]) == 64


def test_phase_scripts_interleave_across_elements_by_name(tmp_path):
    element(tmp_path, "a", {"install.d/50-a": "#!/bin/sh\n", "install.d/10-a": "#!/bin/sh\n"})
    element(tmp_path, "b", {"install.d/20-b": "#!/bin/sh\n", "element-deps": "a\n"})
    els = elements.resolve(["b"], (tmp_path,))
    assert [e.name for e in els] == ["a", "b"]
    assert [(e.name, s.name) for e, s in elements.phase_scripts(els, "install.d")] == [
        ("a", "10-a"), ("b", "20-b"), ("a", "50-a")]


def test_errors_name_file_and_line(tmp_path):
    element(tmp_path, "needs", {"element-deps": "# deps\nbase\nno-such-element\n"})
    with pytest.raises(InvalidInput, match="element 'no-such-element' not found") as exc:
        elements.resolve(["needs"], (tmp_path,))
    assert exc.value.where == f"{tmp_path / 'needs' / 'element-deps'}:3"
    element(tmp_path, "pkgs", {"package-installs": "curl\nNot A Package\n"})
    with pytest.raises(InvalidInput, match="not a Debian package name") as exc:
        elements.resolve(["pkgs"], (tmp_path,))
    assert exc.value.where.endswith("pkgs/package-installs:2")
    d = element(tmp_path, "noexec", {"install.d/10-x": "#!/bin/sh\n"})
    (d / "install.d" / "10-x").chmod(0o644)
    with pytest.raises(InvalidInput, match="not executable"):
        elements.resolve(["noexec"], (tmp_path,))
    with pytest.raises(InvalidInput) as exc:
        elements.resolve(["nope"], (tmp_path,))
    assert exc.value.where == "--element"


def test_a_changed_element_changes_only_the_keys_that_depend_on_it(tmp_path):
    oci, qcow2 = catalog.targets("overcloud-full")
    svc = catalog.targets("service-memcached")[0]
    before = {t.label: keys(t) for t in (oci, qcow2, svc)}
    # an operator's copy of `agent` (found first on --elements-path) with one script changed
    shutil.copytree(elements.SHIPPED / "agent", tmp_path / "agent", symlinks=True)
    script = tmp_path / "agent" / "install.d" / "60-enable-agent"
    script.write_text(script.read_text() + "# changed\n")
    after = {t.label: keys(t, [tmp_path]) for t in (oci, qcow2, svc)}
    for t in (oci, qcow2):
        b, a = before[t.label], after[t.label]
        assert a["debootstrap"] == b["debootstrap"] and a["packages"] == b["packages"]  # no apt again
        assert a["image"] != b["image"] and a["output"] != b["output"]
    assert after[svc.label] == before[svc.label]  # service images do not carry the agent
    # a package list change rebuilds from the package stage
    shutil.copytree(elements.SHIPPED / "kernel", tmp_path / "kernel", symlinks=True)
    (tmp_path / "kernel" / "package-installs").write_text("linux-image-amd64\n")
    k = keys(qcow2, [tmp_path])
    assert k["packages"] != before[qcow2.label]["packages"]
    assert keys(oci, [tmp_path])["packages"] == before[oci.label]["packages"]  # oci has no kernel


def test_openstack_services_share_a_layer_of_their_common_libraries():
    """A service element listing openstack-base is built on it: its packages (oslo ...) are in
    the shared layer's apt stage, one layer for every such service of a release; the others
    (memcached, haproxy ...) stay on service-base alone."""
    openstack = ["service-keystone", "service-glance", "service-nova", "service-nova-compute", "service-neutron",
                 "service-placement"]
    others = ["service-memcached", "service-haproxy", "service-mariadb", "service-rabbitmq"]
    for name in openstack:
        (t,) = catalog.targets(name)
        assert t.layer_on == catalog.OPENSTACK_BASE, name
        b = Builder(t, lambda _m: None, Path("/tmp"), False)
        assert "python3-oslo.messaging" in elements.packages(b.base_elements), name
        assert "openstack-base" not in {e.name for e in b.own_elements}, name
    for name in others:
        assert catalog.targets(name)[0].layer_on == catalog.SERVICE_BASE, name
    shared = {keys(catalog.targets(n)[0])["image"] for n in openstack}
    assert len(shared) == 1 and keys(catalog.targets(others[0])[0])["image"] not in shared
    # ... per release: Zed's is made of bookworm's packages
    assert keys(catalog.targets("service-nova", release="zed")[0])["image"] not in shared
    # an operator's element of their own is built on service-base, its deps in its own layer
    assert catalog.shared_layer("no-such-element") == catalog.SERVICE_BASE


def test_unchanged_inputs_give_the_same_key():
    t = catalog.targets("deploy-ramdisk")[0]
    assert keys(t) == keys(t)


def _uc_start(tmp_path, conf: dict, env=None):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(conf))
    return subprocess.run([sys.executable, str(UC_START)], capture_output=True, text=True,
                          env={**os.environ, "UC_CONFIG": str(cfg), **(env or {})}, timeout=30)


def test_uc_start_copies_config_with_owner_and_mode_then_execs(tmp_path):
    me = pwd.getpwuid(os.getuid()).pw_name
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.conf").write_text("key = value\n")
    (tmp_path / "src" / "dir").mkdir()
    (tmp_path / "src" / "dir" / "inner.conf").write_text("x\n")
    dest = tmp_path / "etc" / "app.conf"
    r = _uc_start(tmp_path, {
        "command": ["/bin/sh", "-c", f"echo started; cat {dest}"],
        "config_files": [
            {"source": str(tmp_path / "src" / "app.conf"), "dest": str(dest), "owner": me, "perm": "0600"},
            {"source": str(tmp_path / "src" / "dir"), "dest": str(tmp_path / "etc" / "dir"), "owner": me,
             "perm": "0640"},
            {"source": str(tmp_path / "absent"), "dest": str(tmp_path / "x"), "optional": True},
        ],
    })
    assert r.returncode == 0, r.stderr
    assert r.stdout == "started\nkey = value\n"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "etc" / "dir").stat().st_mode) == 0o750  # dirs get x where r
    assert stat.S_IMODE((tmp_path / "etc" / "dir" / "inner.conf").stat().st_mode) == 0o640
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("conf,msg", [
    ({"command": ["true"], "config_files": [{"source": "/no/such/file", "dest": "/tmp/x"}]},
     "config_files[0]: source /no/such/file does not exist"),
    ({"command": ["true"], "config_files": [{"source": "/etc/hostname", "dest": "/tmp/uc-x",
                                             "owner": "no-such-user-here"}]},
     "unknown user or group"),
    ({"config_files": []}, "no command"),
    ({"command": ["/no/such/binary"]}, "cannot execute /no/such/binary"),
])
def test_uc_start_errors_are_one_line_and_never_start_the_service(tmp_path, conf, msg):
    r = _uc_start(tmp_path, conf)
    assert r.returncode == 64
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("uc-start: ") and msg in lines[0], r.stderr


def test_prune_outputs_keeps_the_newest_and_any_in_use(tmp_path, monkeypatch):
    import json
    import os
    import time

    from undercloud.images import build

    monkeypatch.setenv("UNDERCLOUD_CACHE", str(tmp_path))
    now = time.time()
    ages = {"new1": 10, "new2": 20, "in-use": 60, "old": 7200, "older": 9000}  # seconds since last use
    for name, age in ages.items():
        d = tmp_path / "outputs" / name
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps({"label": "x (oci)", "artifacts": []}))
        os.utime(d / "manifest.json", (now - age, now - age))
    for other, label in (("other-image", "y (oci) on bookworm"), ("other-suite", "x (oci) on trixie")):
        (tmp_path / "outputs" / other).mkdir()
        (tmp_path / "outputs" / other / "manifest.json").write_text(json.dumps({"label": label, "artifacts": []}))
        os.utime(tmp_path / "outputs" / other / "manifest.json", (now - 9999, now - 9999))
    said = []
    build.prune_outputs("x (oci) on bookworm", said.append, keep=2)  # the manifests above: before suites
    left = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    # Two newest kept; "in-use" is third but was used a minute ago (another home may be uploading it);
    # another image's, and the same image's of another Debian release, are not this group's.
    assert left == ["in-use", "new1", "new2", "other-image", "other-suite"]
    assert len(said) == 2 and all(s.startswith("pruned cached outputs ") for s in said)
