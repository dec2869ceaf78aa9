"""`undercloud service install|uninstall`: a systemd unit running `undercloud serve` for a home,
checked by systemd's own parser; `serve` logs to stderr (the journal) and to the home's log."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_cli


def verify(unit) -> subprocess.CompletedProcess:
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)


def test_install_writes_a_unit_systemd_accepts_and_uninstall_removes_it(tmp_path):
    home = tmp_path / "a home%1"  # a space and a specifier character: both must be escaped
    r = run_cli("service", "install", "--home", str(home), "--user", "root", "--name", "uc-test",
                "--unit-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    unit = tmp_path / "uc-test.service"
    text = unit.read_text()
    assert oct(unit.stat().st_mode & 0o777) == "0o644"
    assert f'Environment="UNDERCLOUD_HOME={tmp_path}/a home%%1"' in text
    assert "User=root" in text and "KillMode=process" in text and "WantedBy=multi-user.target" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(" serve"), exec_start
    program = exec_start.removeprefix("ExecStart=").split()[0]
    assert os.access(program, os.X_OK), program  # this installation's own undercloud (or python)
    assert "systemctl enable --now uc-test" in r.stderr

    v = verify(unit)
    assert v.returncode == 0 and v.stderr == "", v.stderr

    r = run_cli("service", "uninstall", "--name", "uc-test", "--unit-dir", str(tmp_path))
    assert r.returncode == 0 and "removed" in r.stderr, r.stderr
    assert not unit.exists()
    r = run_cli("service", "uninstall", "--name", "uc-test", "--unit-dir", str(tmp_path))
    assert r.returncode == 0 and "not installed" in r.stderr


def test_verify_catches_a_broken_unit(tmp_path):
    """The check above can fail: systemd's parser rejects what we could get wrong."""
    r = run_cli("service", "install", "--print", "--home", str(tmp_path / "h"), "--user", "root")
    assert r.returncode == 0, r.stderr
    broken = tmp_path / "broken.service"
    broken.write_text(r.stdout.replace("KillMode=process", "KillMode=processes"))
    v = verify(broken)
    assert "kill mode" in v.stderr, v.stderr


def test_default_home_is_the_users(tmp_path, monkeypatch):
    monkeypatch.delenv("UNDERCLOUD_HOME", raising=False)
    r = run_cli("service", "install", "--print", "--user", "root")
    assert r.returncode == 0, r.stderr
    assert "Environment=UNDERCLOUD_HOME=/root/.local/share/undercloud\n" in r.stdout


@pytest.mark.parametrize("args, where", [
    (["--user", "no-such-user-x"], "--user: no such user: no-such-user-x"),
    (["--name", "a b"], "--name: bad unit name"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, where):
    r = run_cli("service", "install", "--unit-dir", str(tmp_path), *args)
    assert r.returncode != 0
    assert r.stderr.startswith(f"error: {where}") and r.stderr.count("\n") == 1, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_unit_dir_is_one_line(tmp_path):
    r = run_cli("service", "install", "--unit-dir", str(tmp_path / "missing"), "--home", str(tmp_path / "h"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "cannot write the unit: No such file or directory" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == [], r.stderr


def test_serve_logs_to_stderr_and_to_the_homes_log(tmp_path):
    """Under systemd stderr is the journal; the home's service.log gets the same lines."""
    home = tmp_path / "uc"
    env = {**os.environ, "UNDERCLOUD_HOME": str(home)}
    env.pop("UNDERCLOUD_DB", None)
    proc = subprocess.Popen([sys.executable, "-m", "undercloud", "serve"], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log = home / "service.log"
        deadline = time.monotonic() + 60
        while "serving" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
    finally:
        proc.terminate()
        stderr = proc.communicate(timeout=30)[1]
    line = next(x for x in log.read_text().splitlines() if "serving" in x)
    assert f"serving {home} on https://127.0.0.1:" in line
    assert line in stderr.splitlines()


def test_the_unit_on_a_home_a_cli_started_service_holds_fails_once_naming_its_pid(uc_home, tmp_path):
    """The unit's own command, run while `service start` holds the home, exits with the status
    the unit does not restart on, in one line naming the holder: no restart loop."""
    import json

    from undercloud import daemon

    r = run_cli("service", "start", "-f", "json")
    assert r.returncode == 0, r.stderr
    holder = json.loads(r.stdout)["pid"]
    r = run_cli("service", "install", "--home", str(uc_home.path), "--user", "root", "--name", "uc-held",
                "--unit-dir", str(tmp_path))
    assert r.returncode == 0 and f"runs already (pid {holder})" in r.stderr, r.stderr
    unit = tmp_path / "uc-held.service"
    lines = unit.read_text().splitlines()
    no_restart = {int(x) for line in lines if line.startswith("RestartPreventExitStatus=")
                  for x in line.split("=", 1)[1].split()}
    assert "Restart=on-failure" in lines and daemon.HOME_HELD in no_restart
    # what systemd would run: the unit's ExecStart with its Environment (a real second process)
    argv = next(x for x in lines if x.startswith("ExecStart=")).removeprefix("ExecStart=").split()
    # (this tree's code, not an installed copy's)
    env = {**os.environ, "UNDERCLOUD_HOME": str(uc_home.path), "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30  # at once: it opened nothing (generous for a loaded machine)
    assert second.returncode in no_restart, (second.returncode, second.stderr)
    out = second.stderr.strip().splitlines()
    assert out == [f"error: another undercloud service runs for {uc_home.path} (pid {holder}); "
                   "stop it first (undercloud service stop)"], second.stderr
    assert daemon.serving(uc_home) == holder  # the CLI-started one runs on, untouched
    # any other failure still restarts: only the "home held" status is exempt
    assert no_restart == {daemon.HOME_HELD}
    v = verify(unit)
    assert v.returncode == 0 and v.stderr == "", v.stderr
