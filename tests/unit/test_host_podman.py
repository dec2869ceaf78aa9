"""podman's settings on this host (host/podman.py): the agent's containers.conf, written
where only this user writes, never under a fixed name in the shared /tmp."""

from __future__ import annotations

import os
import stat

from undercloud.agent import kube
from undercloud.host import podman


def test_the_settings_are_the_agents_in_a_directory_of_this_users(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    env = podman.env()
    conf = tmp_path / "run" / "undercloud" / "containers.conf"
    assert env["CONTAINERS_CONF"] == str(conf)
    assert conf.read_text() == kube.CONTAINERS_CONF and 'runtime = "runc"' in conf.read_text()
    assert stat.S_IMODE(conf.parent.stat().st_mode) == 0o700
    conf.write_text("[engine]\nruntime = \"crun\"\n")  # changed behind our back: put right again
    podman.env()
    assert conf.read_text() == kube.CONTAINERS_CONF
    assert sorted(p.name for p in conf.parent.iterdir()) == ["containers.conf"]  # no temporary left


def test_root_keeps_it_under_run_and_others_fall_back_to_their_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert str(podman.conf_path()) == "/run/undercloud/containers.conf"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert podman.conf_path() == tmp_path / ".cache" / "undercloud" / "containers.conf"
