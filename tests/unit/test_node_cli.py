"""`undercloud node ...` through the real CLI and service, with fake nodes."""

from __future__ import annotations

import json

from tests.conftest import run_cli

SECRET = "cli-secret-4242"


def write_env(path, nodes):
    path.write_text(json.dumps({"nodes": nodes}, indent=2))
    return str(path)


def fake_node(i, **extra):
    return {"name": f"ctl-{i}", "pm_type": "fake", "pm_addr": f"cli-fake-{i}", "pm_user": "admin",
            "pm_password": SECRET, "ports": [{"address": f"52:54:00:11:00:{i:02x}"}],
            "capabilities": "profile:control", **extra}


def test_import_manage_provide_power_and_masking(uc_home, tmp_path):
    path = write_env(tmp_path / "instackenv.json", [fake_node(0), fake_node(1, fake_fail=["validate"])])
    r = run_cli("node", "import", path, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert [n["name"] for n in json.loads(r.stdout)] == ["ctl-0", "ctl-1"]

    r = run_cli("node", "manage", "ctl-0", "--wait", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["provision_state"] == "manageable"
    assert "ctl-0: manageable" in r.stderr  # progress on stderr

    r = run_cli("node", "manage", "ctl-1", "--wait")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "error: node ctl-1: manage failed, now 'enroll': fake BMC cli-fake-1 refused the credentials "
        "of user 'admin'")

    r = run_cli("node", "provide", "ctl-1")
    assert r.returncode == 1 and "cannot provide node ctl-1 in state 'enroll' (allowed: manage)" in r.stderr
    assert "Traceback" not in r.stderr

    r = run_cli("node", "provide", "ctl-0", "--wait", "-f", "value")
    assert r.returncode == 0 and "available" in r.stdout
    r = run_cli("node", "power", "on", "ctl-0", "-f", "json")
    assert json.loads(r.stdout)[0]["power_state"] == "on"
    r = run_cli("node", "boot-device", "set", "ctl-0", "pxe", "--persistent")
    assert r.returncode == 0, r.stderr
    r = run_cli("node", "maintenance", "set", "ctl-0", "--reason", "fan", "-f", "json")
    assert json.loads(r.stdout)[0]["maintenance_reason"] == "fan"
    run_cli("node", "maintenance", "unset", "ctl-0")

    r = run_cli("node", "show", "ctl-0", "-f", "json")
    shown = json.loads(r.stdout)
    assert shown["driver_info"]["password"] == "******" and shown["power_state"] == "on"
    everything = "".join(run_cli(*a).stdout for a in (
        ("node", "list", "-f", "json"), ("node", "show", "ctl-1", "-f", "yaml"), ("node", "events", "ctl-1")))
    assert SECRET not in everything
    assert SECRET not in (uc_home.path / "service.log").read_text()

    r = run_cli("node", "list", "--state", "available", "-f", "value")
    assert r.stdout.split()[1] == "ctl-0"
    assert run_cli("node", "delete", "ctl-1").returncode == 0
    assert run_cli("node", "show", "ctl-1").returncode != 0


def test_bad_inventory_is_refused_line_by_line(uc_home, tmp_path):
    path = write_env(tmp_path / "bad.json", [fake_node(0, pm_passwrd="x"), fake_node(1, name="ctl-0")])
    r = run_cli("node", "import", path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("undercloud: started")]
    assert lines[0].startswith(f"error: {path}:") and "nodes[0] (ctl-0): pm_passwrd: unknown field" in lines[0]
    assert "nodes[1] (ctl-0): name: duplicate of nodes[0] (ctl-0)" in lines[1]
    assert lines[-1] == "2 problem(s); nothing was imported"
    assert json.loads(run_cli("node", "list", "-f", "json").stdout) == []
    r = run_cli("node", "import", str(tmp_path / "missing.json"))
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_import_provide_takes_nodes_to_available(uc_home, tmp_path):
    path = write_env(tmp_path / "env.yaml", [fake_node(5), fake_node(6)])
    r = run_cli("node", "import", path, "--provide", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert {n["provision_state"] for n in json.loads(r.stdout)} == {"available"}
    # several nodes are one request; a refusal stops it there, as one request per node did
    r = run_cli("node", "manage", "ctl-5", "nosuch", "ctl-6")
    assert r.returncode != 0 and r.stderr.strip().splitlines()[-1] == "error: no node named or with UUID 'nosuch'"
    shown = {n["name"]: n["provision_state"] for n in json.loads(run_cli("node", "list", "-f", "json").stdout)}
    assert shown == {"ctl-5": "manageable", "ctl-6": "available"}
    r = run_cli("node", "manage", "ctl-6", "-f", "json")
    assert r.returncode == 0 and [n["provision_state"] for n in json.loads(r.stdout)] == ["manageable"]


def test_node_show_names_each_interface_in_effect(uc_home, tmp_path):
    """As Ironic's node show: the driver's power, management and media interfaces, the boot
    interface (how its deploy ramdisk boots: the driver's default, fake's virtual media, or the
    node's own choice), and the service's deploy and inspect interfaces. A node booting from
    the network without a known MAC is inspected through its BMC (no ramdisk can find it)."""
    path = write_env(tmp_path / "env.json", [fake_node(7), fake_node(8, boot_interface="pxe"),
                                             {**fake_node(9, boot_interface="pxe"), "ports": []}])
    assert run_cli("node", "import", path).returncode == 0
    shown = {}
    for name in ("ctl-7", "ctl-8", "ctl-9"):
        r = run_cli("node", "show", name, "-f", "json")
        assert r.returncode == 0, r.stderr
        shown[name] = json.loads(r.stdout)
    keys = ("power_interface", "management_interface", "media_interface", "boot_interface", "deploy_interface",
            "inspect_interface")
    assert {n: tuple(v[k] for k in keys) for n, v in shown.items()} == {
        "ctl-7": ("fake", "fake", "fake", "virtual-media", "ramdisk", "ramdisk"),
        "ctl-8": ("fake", "fake", "fake", "pxe", "ramdisk", "ramdisk"),
        "ctl-9": ("fake", "fake", "fake", "pxe", "ramdisk", "bmc")}
    assert shown["ctl-8"]["driver_info"]["boot_interface"] == "pxe"  # the choice, kept where it was
    r = run_cli("node", "show", "ctl-8")
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in r.stdout.splitlines() if ln.startswith("|")]
    assert r.returncode == 0 and ["boot_interface", "pxe"] in rows and ["power_interface", "fake"] in rows, r.stdout
    r = run_cli("node", "list", "-f", "json")
    assert r.returncode == 0 and {n["name"]: n["inspect_interface"] for n in json.loads(r.stdout)} == {
        "ctl-7": "ramdisk", "ctl-8": "ramdisk", "ctl-9": "bmc"}


def test_help_on_every_node_and_lab_command():
    for args in (["node"], ["node", "import"], ["node", "manage"], ["node", "power"], ["node", "boot-device", "set"],
                 ["node", "maintenance", "set"], ["node", "list"], ["lab"], ["lab", "up"], ["lab", "down"]):
        r = run_cli(*args, "--help")
        assert r.returncode == 0 and "Usage:" in r.stdout, args


def test_service_start_fails_work_interrupted_by_a_stop(uc_home, tmp_path):
    """The nodes' STARTUP hook: a node left busy by a stopped service ends failed, with why."""
    from undercloud.store import Store
    from undercloud.store.nodes import Node

    path = write_env(tmp_path / "env.json", [fake_node(7)])
    assert run_cli("node", "import", path).returncode == 0
    assert run_cli("service", "stop").returncode == 0
    store = Store(uc_home.db_url)
    with store.session() as s:
        s.query(Node).filter(Node.name == "ctl-7").update({"provision_state": "cleaning"})
    store.engine.dispose()
    n = json.loads(run_cli("node", "show", "ctl-7", "-f", "json").stdout)
    assert n["provision_state"] == "clean failed"
    assert n["last_error"] == "interrupted: the undercloud service stopped while cleaning"
