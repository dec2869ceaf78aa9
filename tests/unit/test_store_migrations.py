"""The store's schema under Alembic, and its encryption at rest (issue 17; Alembic as issue 19
asks). The service-level upgrade of an older store is in test_service_hardening.py."""

from __future__ import annotations

import json
import sqlite3
import stat
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, select, text

from tests.conftest import REPO, TEST_STORE, own_store_url
from undercloud.errors import UndercloudError
from undercloud.store import Store, migrate
from undercloud.store.db import Base
from undercloud.store.nodes import Node
from undercloud.store.stacks import Stack

LEGACY = (REPO / "tests/fixtures/store-before-alembic.sql").read_text()
SECRET = "pw-at-rest-51"
# On PostgreSQL every test here gets an empty database (not the migrated copy the others start
# from, tests/pg_support.py): these test the migrations themselves.
pytestmark = pytest.mark.empty_database
sqlite_only = pytest.mark.skipif(TEST_STORE != "sqlite", reason="a SQLite store's file (the run tests PostgreSQL)")


def legacy_store(path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(LEGACY)
    conn.execute("INSERT INTO nodes (id, name, driver, driver_info, bmc_key, properties, provision_state, "
                 "provision_updated_at, power_sync_failures, maintenance, instance_info, created_at, updated_at) "
                 "VALUES ('n1', 'n1', 'fake', ?, 'fake|n1', '{}', 'enroll', 0, 0, 0, '{}', 0, 0)",
                 (json.dumps({"address": "n1", "password": SECRET}),))
    conn.execute("INSERT INTO stacks (id, name, root_id, path, action, status, status_reason, bundle, parameters, "
                 "outputs, description, created_at) VALUES ('s1', 's', 's1', '', 'CREATE', 'COMPLETE', '', NULL, ?, "
                 "NULL, '', 0)", (json.dumps({"p": SECRET}),))
    conn.commit()
    conn.close()


def test_the_migrations_make_exactly_the_models_schema(tmp_path):
    store = Store(own_store_url(tmp_path / "new.db"), tmp_path / "store.key").create_schema()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    with store.engine.connect() as conn:
        assert migrate.current(conn) == migrate.head()


@sqlite_only
def test_a_legacy_store_is_stamped_upgraded_and_can_go_back(tmp_path):
    db = tmp_path / "old.db"
    legacy_store(db)
    store = Store(f"sqlite:///{db}")
    assert migrate.upgrade(store) == migrate.BASELINE
    with store.session() as s:
        assert s.get(Node, "n1").driver_info == {"address": "n1", "password": SECRET}
        assert s.get(Stack, "s1").parameters == {"p": SECRET}
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        stored = conn.execute(text("SELECT driver_info FROM nodes")).scalar()
    assert SECRET not in stored and json.loads(stored).startswith("gAAAAA")  # a Fernet token
    # down to the first revision: plain JSON again, the index and table gone; and up again
    migrate.downgrade(store, migrate.BASELINE)
    raw = sqlite3.connect(db)
    assert json.loads(raw.execute("SELECT driver_info FROM nodes").fetchone()[0])["password"] == SECRET
    assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name='store_meta'").fetchone()[0] == 0
    raw.close()
    assert migrate.upgrade(store) == migrate.BASELINE
    with store.session() as s:
        assert s.get(Node, "n1").driver_info["password"] == SECRET


@sqlite_only
def test_a_new_store_and_its_key_are_private(tmp_path):
    Store(f"sqlite:///{tmp_path / 'uc.db'}").create_schema()
    for name in ("uc.db", "store.key"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


def test_a_wrong_or_broken_key_is_one_line(tmp_path):
    url = own_store_url(tmp_path / "uc.db")
    key = tmp_path / "store.key"
    Store(url, key).create_schema()
    good = key.read_bytes()
    from cryptography.fernet import Fernet

    key.write_bytes(Fernet.generate_key())
    with pytest.raises(UndercloudError, match=r"cannot decrypt the store with key file .*store.key"):
        Store(url, key).create_schema()
    key.write_text("not a key")
    with pytest.raises(UndercloudError, match="not a store key"):
        Store(url, key)
    key.write_bytes(good)
    Store(url, key).create_schema()


def test_encrypted_columns_keep_json_semantics(tmp_path):
    store = Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema()
    values = [{"a": [1, 2.5, None, True]}, [], "text \u00e9\ud800", 0, None]
    with store.engine.begin() as conn:
        for i, v in enumerate(values):
            conn.execute(insert(Stack.__table__).values(
                id=f"s{i}", name=f"s{i}", root_id=f"s{i}", path="", action="CREATE", status="COMPLETE",
                status_reason="", parameters={}, outputs=v, description="", created_at=0))
    with store.engine.connect() as conn:
        got = [conn.execute(select(Stack.__table__.c.outputs).where(Stack.__table__.c.id == f"s{i}")).scalar()
               for i in range(len(values))]
    assert got == values


def test_two_processes_worth_of_opens_at_once_make_one_schema(tmp_path):
    url, key = own_store_url(tmp_path / "race.db"), tmp_path / "store.key"
    errors = []

    def open_():
        try:
            Store(url, key).create_schema()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=open_) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Store(url, key).engine.connect() as conn:
        assert migrate.current(conn) == migrate.head()


def test_root_stack_names_are_unique_but_nested_ones_need_not_be(tmp_path):
    store = Store(own_store_url(tmp_path / "uc.db"), tmp_path / "store.key").create_schema()
    row = dict(path="", action="CREATE", status="COMPLETE", status_reason="", parameters={}, description="",
               created_at=0)
    with store.engine.begin() as conn:
        conn.execute(insert(Stack.__table__).values(id="r1", name="a", root_id="r1", **row))
        # a replacement makes a nested stack of the same name under the same parent before the old goes
        for i in (1, 2):
            conn.execute(insert(Stack.__table__).values(id=f"n{i}", name="a-inner", root_id="r1", parent_id="r1",
                                                        **row))
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        conn.execute(insert(Stack.__table__).values(id="r2", name="a", root_id="r2", **row))


def test_a_key_check_another_opener_writes_meanwhile_is_read_not_refused(tmp_path):
    # Two openers of a new store both find no key-check value; the second to write it must
    # read the first's (and so check its key), not fail on the unique key.
    from sqlalchemy import delete, event

    from undercloud.store.meta import KEY_CHECK, StoreMeta

    url, key = own_store_url(tmp_path / "uc.db"), tmp_path / "store.key"
    first = Store(url, key).create_schema()
    with first.engine.begin() as conn:
        conn.execute(delete(StoreMeta.__table__))  # as just after the migrations, before the check
    second = Store(url, key)
    wrote = []

    def first_writes_it(_session):  # lands between the second's read and its write
        if not wrote:
            wrote.append(True)
            with first.session() as s:
                s.add(StoreMeta(key=KEY_CHECK, value={"undercloud": True}))

    event.listen(second.sessions, "before_commit", first_writes_it)
    migrate._check_key(second)
    assert wrote
    with second.session() as s:
        assert s.get(StoreMeta, KEY_CHECK).value == {"undercloud": True}
