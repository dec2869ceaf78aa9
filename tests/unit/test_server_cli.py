"""`undercloud flavor` and `undercloud server` through the real service: output formats and
one-line errors (no podman needed: no server is created here)."""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_flavor_cli_create_list_show_delete_and_bad_input(uc_home):
    r = run_cli("flavor", "create", "ct-small", "--vcpus", "2", "--ram", "256", "--disk", "5",
                "--property", "hypervisor_type=container", "--property", "capabilities:profile=control",
                "-f", "json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["hypervisor_type"] == "container" and made["properties"]["capabilities:profile"] == "control"
    names = [f["name"] for f in json.loads(run_cli("flavor", "list", "-f", "json").stdout)]
    assert names == ["baremetal", "compute", "container", "control", "ct-small", "vm", "vm-control"]
    assert json.loads(run_cli("flavor", "show", "control", "-f", "json").stdout)["hypervisor_type"] == "baremetal"

    for args, message in [
        (["--vcpus", "0", "--ram", "1", "--disk", "1"], "--vcpus: must be an integer >= 1, got 0"),
        (["--vcpus", "1", "--ram", "1", "--disk", "1", "--property", "hypervisor_type=xen"],
         "--property hypervisor_type: unknown hypervisor_type 'xen'; one of baremetal, vm, container"),
        (["--vcpus", "1", "--ram", "1", "--disk", "1", "--property", "novalue"], "--property: expected KEY=VALUE"),
    ]:
        r = run_cli("flavor", "create", "bad", *args)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli("flavor", "create", "ct-small", "--vcpus", "1", "--ram", "1", "--disk", "1")
    assert r.returncode != 0 and "a flavor named 'ct-small' exists" in r.stderr
    assert "bad" not in run_cli("flavor", "list", "-f", "value").stdout

    assert run_cli("flavor", "delete", "ct-small").returncode == 0
    r = run_cli("flavor", "show", "ct-small")
    assert r.returncode != 0 and r.stderr.strip().endswith("no flavor 'ct-small' (flavors: baremetal, compute, "
                                                           "container, control, vm, vm-control)")


def test_server_cli_lists_and_names_what_is_missing(uc_home):
    assert json.loads(run_cli("server", "list", "-f", "json").stdout) == []
    hosts = json.loads(run_cli("server", "hypervisors", "-f", "json").stdout)
    assert {h["hypervisor_type"] for h in hosts} == {"container", "vm"}
    for args in (["show", "nope"], ["console", "nope"], ["delete", "nope"], ["power", "on", "nope"]):
        r = run_cli("server", *args)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines()[-1] == "error: server: no server named or with id 'nope'", r.stderr
