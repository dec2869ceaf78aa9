"""OvercloudRelease: the OpenStack release an overcloud runs (overcloud/release.py), its
images (images/catalog.py: a release is a Debian suite's packages), and the refusal to move an
overcloud to another release in place."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import run_cli
from undercloud.errors import InvalidInput
from undercloud.images import catalog
from undercloud.overcloud import release


def env(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_release_an_environment_gives_is_checked_and_the_last_wins(tmp_path):
    quoted = env(tmp_path, "a.yaml", 'parameter_defaults:\n  OvercloudRelease: "2025.1"\n')
    bare = env(tmp_path, "b.yaml", "parameter_defaults:\n  OvercloudRelease: 2025.1\n")  # YAML's float
    zed = env(tmp_path, "c.yaml", "parameters:\n  OvercloudRelease: zed\n")
    other = env(tmp_path, "d.yaml", "parameter_defaults:\n  NovaWorkers: 1\n")
    assert release.given([quoted]) == release.given([bare]) == "2025.1"
    assert release.given([quoted, zed]) == "zed" and release.given([zed, quoted]) == "2025.1"
    assert release.given([other]) is None and release.given([]) is None
    bad = env(tmp_path, "e.yaml", "parameter_defaults:\n  OvercloudRelease: antelope\n")
    with pytest.raises(InvalidInput) as e:
        release.given([bad])
    assert e.value.where == "OvercloudRelease" and "'antelope'" in e.value.message
    assert "zed or 2025.1" in e.value.message


def test_an_overcloud_keeps_its_release_and_is_never_moved_to_another(tmp_path):
    epoxy = [env(tmp_path, "a.yaml", 'parameter_defaults:\n  OvercloudRelease: "2025.1"\n')]
    zed = [env(tmp_path, "z.yaml", "parameter_defaults:\n  OvercloudRelease: zed\n")]
    assert release.choose("oc", [], None) == catalog.DEFAULT_RELEASE  # a new overcloud: the default
    assert release.choose("oc", epoxy, None) == "2025.1"
    assert release.choose("oc", [], {"release": "2025.1", "images": {}}) == "2025.1"  # kept
    assert release.choose("oc", epoxy, {"release": "2025.1"}) == "2025.1"
    assert release.choose("oc", [], {"images": {}}) == "zed"  # deployed before releases were kept: zed
    for given, have in ((epoxy, {"images": {}}), (epoxy, {"release": "zed"}), (zed, {"release": "2025.1"})):
        with pytest.raises(InvalidInput) as e:
            release.choose("oc", given, have)
        assert e.value.where == "OvercloudRelease"
        assert "overcloud oc runs OpenStack " in e.value.message and "not moved to" in e.value.message
        assert "\n" not in e.value.message


def test_a_service_image_of_a_release_is_made_of_that_releases_debian():
    assert [t.debian for t in catalog.targets("service-nova")] == [catalog.RELEASES[catalog.DEFAULT_RELEASE]]
    assert [t.debian for t in catalog.targets("service-nova", release="zed")] == ["bookworm"]
    (t,) = catalog.targets("service-nova", release="2025.1")
    assert (t.name, t.type, t.debian, t.elements) == ("service-nova", "oci", "trixie", ("nova",))
    # outputs of both releases are cached apart: one never pushes the other out
    assert t.cache_group == "service-nova (oci) on trixie"
    assert catalog.targets("service-nova", release="zed")[0].cache_group == "service-nova (oci) on bookworm"
    assert {t.debian for t in catalog.default_targets(["service-nova"], "2025.1") if t.name.startswith("service-")} \
        == {"trixie"}
    # the undercloud's own worker carries this host's Python: the Debian of that Python, whatever the release
    for r in catalog.RELEASES:
        assert catalog.targets("service-undercloud-worker", release=r)[0].debian == catalog.host_python_suite()
    assert catalog.host_python_suite() == {(3, 11): "bookworm", (3, 13): "trixie"}[sys.version_info[:2]]
    with pytest.raises(InvalidInput, match="unknown OpenStack release 'victoria'"):
        catalog.targets("service-nova", release="victoria")
    with pytest.raises(InvalidInput, match="only service images have an OpenStack release"):
        catalog.targets("overcloud-full", release="2025.1")


def test_registering_an_image_replaces_only_its_own_releases_older_one(tmp_path):
    import hashlib

    from undercloud.config import Home
    from undercloud.images.store import ImageStore
    from undercloud.store import Store

    home = Home(tmp_path / "uc").ensure()
    images = ImageStore(home, Store(home.db_url).create_schema())
    ids = {}
    for n, suite in enumerate(("bookworm", "trixie", "bookworm")):
        data = f"content {n}".encode()
        sha = hashlib.sha256(data).hexdigest()
        images.put_blob([data], sha, len(data))
        ids[n] = images.register([{"name": "service-x", "disk_format": "oci", "sha256": sha,
                                   "properties": {"hypervisor_type": "container", "os_version": suite}}],
                                 replace=True)[0]["id"]
    left = {i["id"] for i in images.list(name="service-x")}
    assert left == {ids[1], ids[2]}  # the newer bookworm one replaced the first; trixie's stays


def test_the_cli_refuses_an_unknown_release_in_one_line(uc_home, tmp_path):
    bad = env(tmp_path, "bad.yaml", "parameter_defaults:\n  OvercloudRelease: '2024.2'\n")
    r = run_cli("deploy", "--dry-run", "-e", str(bad))
    assert r.returncode != 0 and "OvercloudRelease: '2024.2' is not a release this undercloud deploys" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    listed = run_cli("image", "list", "-f", "json")
    assert listed.returncode == 0 and json.loads(listed.stdout or "[]") == []
    helped = run_cli("image", "build", "--help").stdout
    assert f"[{'|'.join(catalog.RELEASES)}]" in helped  # the CLI offers every release the catalog builds
    r = run_cli("image", "build", "overcloud-full", "--release", "2025.1")
    assert r.returncode != 0 and "only service images have an OpenStack release" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_dry_run_of_a_zed_overcloud_refuses_2025_1_before_anything(uc_home, tmp_path):
    from undercloud.cli.client import Client
    from undercloud.overcloud.state import StackState

    run_cli("service", "start")
    StackState(Client(), "overcloud").put("deployed-sets", {"current": {"images": {}, "release": "zed"}})
    epoxy = env(tmp_path, "epoxy.yaml", 'parameter_defaults:\n  OvercloudRelease: "2025.1"\n')
    r = run_cli("deploy", "--dry-run", "-e", str(epoxy))
    assert r.returncode != 0, r.stderr
    assert "OvercloudRelease: overcloud overcloud runs OpenStack zed and is not moved to 2025.1 in place" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == "" and "would build" not in r.stderr
    ok = run_cli("deploy", "--dry-run", "-e", "environments/release-2025.1.yaml", "--stack", "other")
    assert ok.returncode == 0 and "(OpenStack 2025.1)" in ok.stderr, ok.stderr
