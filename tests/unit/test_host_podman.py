"""podman's settings on this host (host/podman.py): the agent's containers.conf, written
where only this user writes, never under a fixed name in the shared /tmp."""

from __future__ import annotations

import os
import stat

from undercloud.agent import engine
from undercloud.host import podman


def test_the_settings_are_the_agents_in_a_directory_of_this_users(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    env = podman.env()
    conf = tmp_path / "run" / "undercloud" / "containers.conf"
    assert env["CONTAINERS_CONF"] == str(conf)
    assert conf.read_text() == engine.CONTAINERS_CONF and 'runtime = "runc"' in conf.read_text()
    assert stat.S_IMODE(conf.parent.stat().st_mode) == 0o700
    conf.write_text("[engine]\nruntime = \"crun\"\n")  # changed behind our back: put right again
    podman.env()
    assert conf.read_text() == engine.CONTAINERS_CONF
    assert sorted(p.name for p in conf.parent.iterdir()) == ["containers.conf"]  # no temporary left


def test_root_keeps_it_under_run_and_others_fall_back_to_their_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert str(podman.conf_path()) == "/run/undercloud/containers.conf"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert podman.conf_path() == tmp_path / ".cache" / "undercloud" / "containers.conf"


def _podman_failing(messages):
    """A podman whose `rm` fails with each of `messages` in turn, then removes."""
    from undercloud.host.run import CommandFailed
    calls = []

    def fake(*args, **kw):
        calls.append(args)
        if len(calls) <= len(messages):
            raise CommandFailed(["podman", *args], 2, messages[len(calls) - 1])
    return fake, calls


def test_remove_retries_a_container_that_stopped_while_being_killed(monkeypatch):
    """podman's race (CI, December): `rm -f` on a container exiting by itself fails with
    'could not be stopped ... container state improper: stopped'; the next call removes it."""
    race = "Error: cannot remove container 7380 as it could not be stopped: container state improper: stopped"
    fake, calls = _podman_failing([race])
    monkeypatch.setattr(podman, "podman", fake)
    monkeypatch.setattr(podman.time, "sleep", lambda s: None)
    podman.remove("s-1", depend=True)
    assert len(calls) == 2 and calls[-1] == ("rm", "-f", "-t", "0", "--ignore", "--depend", "s-1")


def test_remove_raises_other_failures_at_once_and_the_race_after_its_attempts(monkeypatch):
    import pytest

    from undercloud.host.run import CommandFailed
    monkeypatch.setattr(podman.time, "sleep", lambda s: None)
    fake, calls = _podman_failing(["Error: container is in use by a pod"])
    monkeypatch.setattr(podman, "podman", fake)
    with pytest.raises(CommandFailed, match="in use"):
        podman.remove("s-1")
    assert len(calls) == 1
    fake, calls = _podman_failing(["could not be stopped"] * 5)
    monkeypatch.setattr(podman, "podman", fake)
    with pytest.raises(CommandFailed, match="could not be stopped"):
        podman.remove("s-1", attempts=3)
    assert len(calls) == 3
