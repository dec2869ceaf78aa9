"""Nested stack names are unique within their parent (as Heat's are): a replacement's nested
stack does not take the name of the one it replaces, names longer than the store holds are cut
without sharing one, and a root stack name too long is refused before anything is written."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from tests.unit.test_engine_ops import Eng
from undercloud.errors import InvalidInput
from undercloud.names import NAME_MAX
from undercloud.store.stacks import Stack, StackResource

STACKS = Stack.__table__
CHILD = "heat_template_version: 2018-08-31\nresources:\n  v: {type: OS::Heat::Value, properties: {value: %d}}\n"


@pytest.fixture
def eng(tmp_path):
    e = Eng(tmp_path)
    e.write("c1.yaml", CHILD % 1)
    e.write("c2.yaml", CHILD % 2)
    return e


def top(eng, *resources: tuple[str, str]) -> dict:
    body = "".join(f"  {n}: {{type: {t}}}\n" for n, t in resources)
    return eng.bundle("t.yaml", "heat_template_version: 2018-08-31\nresources:\n" + body)


def nested_rows(eng) -> list[dict]:
    with eng.store.engine.connect() as c:
        return [dict(r) for r in c.execute(select(STACKS).where(STACKS.c.parent_id.is_not(None))).mappings()]


def test_a_replaced_nested_stack_and_its_replacement_have_different_names(eng):
    assert eng.create("s", top(eng, ("n", "c1.yaml")))["stack_status"] == "CREATE_COMPLETE"
    assert [r["name"] for r in nested_rows(eng)] == ["s-n"]
    # a type change replaces the resource: the new nested stack exists beside the old one
    assert eng.update("s", top(eng, ("n", "c2.yaml")))["stack_status"] == "UPDATE_COMPLETE"
    evs = [(e["stack_name"], e["resource_status"]) for e in eng.svc.events("s")
           if e["resource_type"] == "OS::Heat::Stack" and e["stack_name"] != "s"]
    created = [n for n, st in evs if st == "CREATE_IN_PROGRESS"]
    deleted = [n for n, st in evs if st == "DELETE_IN_PROGRESS"]
    assert created[0] == "s-n" and deleted == ["s-n"]
    assert created[1].startswith("s-n-") and created[1] != "s-n"  # never two "s-n" in one parent
    assert [r["name"] for r in nested_rows(eng)] == [created[1]]
    # the plain name is free again: the next replacement takes it
    assert eng.update("s", top(eng, ("n", "c1.yaml")))["stack_status"] == "UPDATE_COMPLETE"
    assert [r["name"] for r in nested_rows(eng)] == ["s-n"]


def test_long_nested_names_are_cut_to_the_store_limit_and_stay_distinct(eng):
    root = "r" + "o" * 240
    # the two names differ only where a cut to 255 characters drops the middle
    a, b = "a1" + "x" * 200, "a2" + "x" * 200
    assert eng.create(root, top(eng, (a, "c1.yaml"), (b, "c1.yaml")))["stack_status"] == "CREATE_COMPLETE"
    names = [r["name"] for r in nested_rows(eng)]
    assert len(names) == 2 and len(set(names)) == 2
    assert all(len(n) <= NAME_MAX and n.startswith(root[:100]) for n in names)
    # the physical names made from them fit too (PostgreSQL refused the write), their suffix kept
    with eng.store.engine.connect() as c:
        res = StackResource.__table__
        rows = c.execute(select(res.c.physical_id, res.c.uuid).where(res.c.name == "v")).all()
    assert len(rows) == 2
    for physical, uuid in rows:
        assert len(physical) <= NAME_MAX and physical.endswith("-v-" + uuid.replace("-", "")[:12]), physical


def test_a_root_stack_name_too_long_is_refused_before_any_write(eng):
    with pytest.raises(InvalidInput, match=f"characters, at most {NAME_MAX}") as e:
        eng.svc.create("s" * (NAME_MAX + 1), top(eng, ("n", "c1.yaml")), {})
    assert "\n" not in str(e.value)
    with eng.store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(STACKS)).scalar() == 0
    assert eng.create("s" * NAME_MAX, top(eng, ("n", "c1.yaml")))["stack_status"] == "CREATE_COMPLETE"
