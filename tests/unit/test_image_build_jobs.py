"""`image build --all` and a deploy's builds run independent images at once (cli/image.py
build_targets): records in the targets' order, at most `jobs` running, the first failure
stopping those not started. The builder itself is replaced by a timed stand-in here (the
integration tier and the CI's image phase run the real one through the same function)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from undercloud.cli import image as cli_image
from undercloud.errors import InvalidInput, UndercloudError
from undercloud.images import build as builder
from undercloud.images import catalog


class FakeClient:
    def __init__(self, tmp_path):
        self.home = SimpleNamespace(path=tmp_path)

    def get(self, path, params=None):
        return []  # nothing registered


def stand_in(running: list, peak: list, fail: str | None = None, lock=threading.Lock()):  # noqa: B008
    def build(target, **_kw):
        with lock:
            running.append(target.name)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.2)
        with lock:
            running.remove(target.name)
        if target.name == fail:
            raise builder.BuildFailed("element 'x' failed in phase install.d", target.label)
        return builder.Result(target, "k" * 64, up_to_date=True, current=[{"name": target.name}])
    return build


def targets(*names):
    return [t for n in names for t in catalog.targets(n, release="2025.1")]


def test_independent_builds_run_at_once_and_keep_their_order(tmp_path, monkeypatch):
    running, peak = [], [0]
    monkeypatch.setattr(builder, "build", stand_in(running, peak))
    names = ["service-nova", "service-glance", "service-keystone", "service-memcached"]
    said = []
    records = cli_image.build_targets(FakeClient(tmp_path), targets(*names), say=said.append, jobs=2)
    assert [r["name"] for r in records] == names
    assert peak[0] == 2  # two at a time, never more
    assert sorted(said) == sorted(f"{n} (oci): up to date ({'k' * 12}), nothing to do" for n in names)
    peak[0] = 0
    cli_image.build_targets(FakeClient(tmp_path), targets(*names), say=said.append, jobs=1)
    assert peak[0] == 1


def test_the_first_failure_stops_the_builds_not_started(tmp_path, monkeypatch):
    running, peak = [], [0]
    started = []
    fake = stand_in(running, peak, fail="service-nova")

    def build(target, **kw):
        started.append(target.name)
        return fake(target, **kw)
    monkeypatch.setattr(builder, "build", build)
    names = ["service-nova", "service-glance", "service-keystone", "service-memcached", "service-haproxy"]
    with pytest.raises(UndercloudError, match="element 'x' failed in phase install.d"):
        cli_image.build_targets(FakeClient(tmp_path), targets(*names), say=lambda _l: None, jobs=2)
    assert running == []  # the running ones ended before the error came out
    assert started[:2] == names[:2] and len(started) < len(names)


def test_build_jobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("UNDERCLOUD_BUILD_JOBS", "3")
    assert cli_image.build_jobs() == 3
    monkeypatch.delenv("UNDERCLOUD_BUILD_JOBS")
    assert 1 <= cli_image.build_jobs() <= 4
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("UNDERCLOUD_BUILD_JOBS", bad)
        with pytest.raises(InvalidInput, match="UNDERCLOUD_BUILD_JOBS"):
            cli_image.build_jobs()
