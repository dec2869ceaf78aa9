"""What `undercloud deploy` keeps of an overcloud between runs lives in the store
(`/v1/overcloud-state`, overcloud/state.py), not in the deploying home: secrets
made once and shared by every CLI of the store, merged so that racing deploys agree, moved
in from an older home's files, encrypted at rest, forgotten with the overcloud."""

from __future__ import annotations

import json
import logging

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import run_cli
from undercloud.cli.client import Client
from undercloud.config import Home
from undercloud.errors import InvalidInput
from undercloud.overcloud.state import StackState

KINDS = {"AdminPassword": "password", "KeystoneFernetKey0": "fernet", "RabbitPassword": "password"}


def test_secrets_are_made_once_and_yours_win_and_are_kept(uc_home):
    first = StackState(Client(uc_home), "oc").secrets(KINDS)
    assert set(first) == set(KINDS) and len(first["AdminPassword"]) == 24 and len(first["KeystoneFernetKey0"]) == 44
    assert StackState(Client(uc_home), "oc").secrets(KINDS) == first  # a later deploy: the same
    mine = StackState(Client(uc_home), "oc").secrets(KINDS, {"AdminPassword": "chosen-by-me"})
    assert mine == {**first, "AdminPassword": "chosen-by-me"}
    # Later deploys without that environment keep it; a new service's secret is added.
    later = StackState(Client(uc_home), "oc").secrets({**KINDS, "NovaPassword": "password"})
    assert later["AdminPassword"] == "chosen-by-me" and later["RabbitPassword"] == first["RabbitPassword"]
    assert len(later["NovaPassword"]) == 24
    assert StackState(Client(uc_home), "other").secrets(KINDS)["RabbitPassword"] != first["RabbitPassword"]


def test_two_deploys_making_the_first_secrets_at_once_agree(uc_home):
    a, b = StackState(Client(uc_home), "oc"), StackState(Client(uc_home), "oc")
    assert a.get("secrets") is None and b.get("secrets") is None  # both read before either wrote
    made_by_a = a.secrets(KINDS)
    assert b.secrets(KINDS) == made_by_a  # b's own new values only filled what was missing: nothing


def test_kept_state_is_encrypted_at_rest(uc_home):
    secrets = StackState(Client(uc_home), "oc").secrets(KINDS)
    with create_engine(uc_home.db_url).connect() as conn:
        rows = conn.execute(text("SELECT stack, name, value FROM overcloud_state")).all()
    assert [(r[0], r[1]) for r in rows] == [("oc", "secrets")]
    assert not any(v in str(rows) for v in secrets.values())


def test_an_older_homes_files_move_into_the_store(uc_home, caplog):
    d = uc_home.path / "overcloud" / "oc"
    d.mkdir(parents=True)
    (d / "secrets.json").write_text(json.dumps({"AdminPassword": "from-the-old-home"}))
    (d / "deployed-sets.json").write_text(json.dumps({"current": {"images": {}}}))
    (d / "last-deploy.json").write_text("{broken")
    with caplog.at_level(logging.WARNING, "undercloud.overcloud"):
        state = StackState(Client(uc_home), "oc")
        assert state.secrets(KINDS)["AdminPassword"] == "from-the-old-home"
    assert state.get("deployed-sets") == {"current": {"images": {}}}
    assert state.get("last-deploy") is None
    assert "last-deploy.json: not moved into the store (JSONDecodeError)" in caplog.text
    assert sorted(p.name for p in d.iterdir()) == ["last-deploy.json"]  # moved ones go; a broken one stays
    # Another home's CLI (another worker's) sees what was moved.
    other = Client(uc_home)
    other.home = Home(uc_home.path.parent / "elsewhere")
    assert StackState(other, "oc").secrets()["AdminPassword"] == "from-the-old-home"
    # What the store has wins over a file left in a home later.
    (d / "secrets.json").write_text(json.dumps({"AdminPassword": "stale"}))
    assert StackState(Client(uc_home), "oc").secrets()["AdminPassword"] == "from-the-old-home"
    assert (d / "secrets.json").exists()


def test_forget_removes_what_was_kept_of_that_stack_only(uc_home):
    StackState(Client(uc_home), "oc").secrets(KINDS)
    StackState(Client(uc_home), "oc").put("last-deploy", {"digest": "d"})
    StackState(Client(uc_home), "keep").put("last-deploy", {"digest": "k"})
    StackState(Client(uc_home), "oc").forget()
    assert Client(uc_home).get("/v1/overcloud-state/oc") == {}
    assert Client(uc_home).get("/v1/overcloud-state/keep") == {"last-deploy": {"digest": "k"}}


def test_bad_names_are_one_line_and_write_nothing(uc_home):
    with pytest.raises(InvalidInput, match="a stack name starts with a letter"):
        StackState(Client(uc_home), "9lives")
    r = run_cli("stack", "list")  # the service is up
    assert r.returncode == 0
    client = Client(uc_home)
    with pytest.raises(InvalidInput, match="name: unknown overcloud state 'passwords'"):
        client.put("/v1/overcloud-state/oc/passwords", json={"value": {"x": 1}})
    with pytest.raises(InvalidInput, match="stack name 'bad name'"):
        client.get("/v1/overcloud-state/bad%20name")
    with pytest.raises(InvalidInput, match="unknown overcloud state"):
        client.get("/v1/overcloud-state", params={"name": "nope"})
    assert client.get("/v1/overcloud-state/oc") == {}
