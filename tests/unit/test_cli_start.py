"""The CLI starts light: `undercloud --help` imports no command module, and no command module
imports the service side (api/, store/, the engine) or an HTTP library; its client speaks
to the service with the standard library, errors as one line."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from tests.conftest import run_cli
from undercloud.cli import commands

SERVICE_SIDE = ("undercloud.api", "undercloud.store", "undercloud.orchestration.engine", "sqlalchemy",
                "httpx", "uvicorn", "fastapi")


def modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_help_imports_no_command_module():
    loaded = modules_after("import sys; sys.argv = ['undercloud', '--help']\n"
                           "from undercloud.cli.main import main\n"
                           "try:\n    main()\nexcept SystemExit:\n    pass")
    assert not {m for _n, (m, _a, _h) in commands.COMMANDS.items()} & loaded
    assert not [m for m in loaded if m.startswith(SERVICE_SIDE)]


def test_no_command_module_imports_the_service_side():
    names = [m for _n, (m, _a, _h) in commands.COMMANDS.items()]
    loaded = modules_after("import importlib\n" + "\n".join(f"importlib.import_module({m!r})" for m in names))
    assert set(names) <= loaded
    assert not sorted(m for m in loaded if m.startswith(SERVICE_SIDE))


@pytest.mark.parametrize("name", sorted(commands.COMMANDS))
def test_help_line_kept_for_a_command_is_its_own(name):
    cmd = commands.load(name)
    first = inspect.cleandoc(cmd.help).split("\n\n")[0].replace("\n", " ")
    assert commands.COMMANDS[name][2] == first


def test_help_lists_every_command_and_an_unknown_one_is_one_line():
    r = run_cli("--help")
    assert r.returncode == 0
    listed = [ln.split()[0] for ln in r.stdout.split("Commands:")[1].splitlines() if ln.strip()]
    assert listed == sorted(commands.COMMANDS)
    r = run_cli("stak", "list")
    assert r.returncode == 2 and "No such command 'stak'" in r.stderr and "Traceback" not in r.stderr


def test_client_talks_to_the_service_and_maps_its_errors(uc_home):
    from undercloud.cli.client import Client
    from undercloud.errors import NotFound, ServiceUnavailable

    client = Client(uc_home)
    assert client.get("/v1/stacks") == []
    assert client.get("/v1/flavors", params={"limit": 2, "ignored": None})  # the defaults exist
    with pytest.raises(NotFound, match="nope"):
        client.get("/v1/stacks/nope")
    with pytest.raises(NotFound):  # a HEAD answer has no body: the status alone says it
        client.request("HEAD", "/v1/images/blobs/" + "0" * 64)
    with client.stream("GET", "/v1/health") as r:
        assert r.status == 200 and json.loads(r.read())["home"] == str(uc_home.path)
    client.base_url = "https://127.0.0.1:1"  # nothing listens there
    with pytest.raises(ServiceUnavailable, match="undercloud service at .*refused"):
        client.get("/v1/stacks")
