"""The engine's typed state: the enums keep the stored strings, inbox messages are
dispatched by their type, resource rows are read into ResourceRow and written back as columns."""

import threading

from undercloud.orchestration.engine.walk import (
    ENDED,
    Action,
    CallDone,
    Signal,
    Status,
    TaskState,
    Walk,
    new_root_row,
)
from undercloud.orchestration.engine.writer import RES_COLUMNS, ResourceRow, Writer


def test_actions_and_statuses_are_the_stored_strings():
    assert [str(a) for a in Action] == ["CREATE", "UPDATE", "DELETE", "ROLLBACK", "SIGNAL"]
    assert [str(s) for s in Status] == ["INIT", "IN_PROGRESS", "COMPLETE", "FAILED"]
    assert f"{Action.CREATE}_{Status.COMPLETE}" == "CREATE_COMPLETE"
    assert Status.FAILED == "FAILED" and ENDED == {"done", "failed"}


class FakeTask:
    def __init__(self, state: TaskState, **methods):
        self.state, self.path = state, "a.b"
        self.__dict__.update(methods)


def walk() -> Walk:
    return Walk(None, new_root_row("s", {}, {}, "", "CREATE", {}))


def test_a_signal_for_a_stack_not_in_the_walk_is_refused_and_released():
    w, done, errors = walk(), threading.Event(), []
    w.inbox.put(Signal("no-such-stack", "r", {}, done, errors))
    assert w.take_inbox() is True
    assert done.is_set() and isinstance(errors[0], LookupError)
    assert w.take_inbox() is False  # the inbox is empty


def test_a_late_result_of_an_ended_task_is_dropped():
    w = walk()
    task = FakeTask(TaskState.FAILED)
    w.inflight[task] = None
    w.inbox.put(CallDone(task, poll=True, result=None, exc=RuntimeError("late")))
    assert w.take_inbox() is True
    assert task not in w.inflight and task.state == TaskState.FAILED and w.failure is None


def test_a_result_reaches_its_task():
    w, steps = walk(), []
    task = FakeTask(TaskState.RUN, step_done=lambda: steps.append("done"))
    w.inflight[task] = None
    w.inbox.put(CallDone(task, poll=True, result=True))
    w.take_inbox()
    assert steps == ["done"] and not w.inflight


def test_a_row_read_from_the_store_is_written_back_column_for_column():
    stored = {"id": 7, **{c: None for c in RES_COLUMNS}}
    stored.update(uuid="u", stack_id="s", root_id="s", name="r", type="OS::Heat::None", action="CREATE",
                  status="COMPLETE", status_reason="ok", requires=["x"], created_at=1.0)
    row = ResourceRow.from_store(stored)
    assert row.data == {} and row.requires == ["x"] and row.name == "r"
    assert row.values(RES_COLUMNS) == {**{c: stored[c] for c in RES_COLUMNS}, "data": {}}
    w = Writer(None)
    w.touch_row(row)
    w.drop_row(row)
    assert w.gone_rows == {"u"} and not w.dirty_rows
