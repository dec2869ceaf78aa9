"""Resuming after a crash, in-process: the walk dies mid-create (nothing flushed after the
write-ahead of IN_PROGRESS rows), a new engine on the same store resumes it; a plugin that
names what it makes after its uuid finds it and creates nothing twice. Blocking plugins run
side by side in the worker pool."""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.unit.test_engine_ops import Eng
from undercloud.orchestration.engine import StackService
from undercloud.orchestration.resources import registry
from undercloud.orchestration.resources.base import Plugin, Prop

CLOUD: dict[str, dict] = {}   # what the fake cloud holds: name -> {"creates": n}
CRASH = threading.Event()


class Crash(BaseException):
    """Stands for the process dying: nothing catches it, nothing is flushed after it."""


class Thing(Plugin):
    type_name = "Test::Thing"
    properties_schema = {"size": Prop("integer", default=1, update_allowed=True)}

    def create(self) -> None:
        name = f"thing-{self.uuid}"
        if name not in CLOUD:  # find what an interrupted call made
            CLOUD[name] = {"creates": 0}
            CLOUD[name]["creates"] += 1
        self.physical_id = name

    def check_complete(self, action: str) -> bool:
        if CRASH.is_set():
            raise Crash()
        return True

    def delete(self) -> None:
        CLOUD.pop(f"thing-{self.uuid}", None)


class Fragile(Thing):
    type_name = "Test::Fragile"
    resumable = False


class Slow(Plugin):
    type_name = "Test::Slow"
    blocking = True
    running = 0
    most = 0  # the most create() calls seen running at once
    lock = threading.Lock()

    def create(self) -> None:
        with Slow.lock:
            Slow.running += 1
            Slow.most = max(Slow.most, Slow.running)
        time.sleep(0.5)  # a blocking call (a host command, say)
        with Slow.lock:
            Slow.running -= 1


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")


class Hung(Plugin):
    type_name = "Test::Hung"
    blocking = True
    timeout = 0.5

    def create(self) -> None:
        time.sleep(3)  # a call that never answers in time

    def waiting_for(self, action: str) -> str:
        return "the hung call to answer"


@pytest.fixture
def eng(tmp_path):
    for cls in (Thing, Fragile, Slow, Hung):
        registry.register(cls)
    CLOUD.clear()
    CRASH.clear()
    yield Eng(tmp_path)
    for cls in (Thing, Fragile, Slow, Hung):
        registry.unregister(cls.type_name)


def template(kind: str, n: int) -> str:
    return "heat_template_version: 2018-08-31\nresources:\n" + "".join(
        f"  r{i}: {{type: {kind}}}\n" for i in range(n))


def test_resume_after_a_crash_creates_nothing_twice(eng):
    b = eng.bundle("t.yaml", template("Test::Thing", 5))
    CRASH.set()
    eng.svc.create("s", b, {}, wait=True)  # the walk dies inside its first poll
    assert eng.svc.show("s")["stack_status"] == "CREATE_IN_PROGRESS"
    assert len(CLOUD) == 1  # made, but the walk died before its state was written
    CRASH.clear()
    fresh = StackService(eng.store)  # the next start of the service
    assert fresh.resume_all() == [eng.svc.show("s")["id"]]
    fresh.wait("s", 10)
    s = fresh.show("s")
    assert s["stack_status"] == "CREATE_COMPLETE", s["stack_status_reason"]
    assert len(CLOUD) == 5 and all(v["creates"] == 1 for v in CLOUD.values())
    assert sorted(r["physical_resource_id"] for r in fresh.resources("s")) == sorted(CLOUD)
    fresh.delete("s", wait=True)
    assert CLOUD == {}


def test_a_plugin_that_cannot_resume_fails_with_a_reason(eng):
    b = eng.bundle("t.yaml", template("Test::Fragile", 1))
    CRASH.set()
    eng.svc.create("s", b, {}, wait=True)
    CRASH.clear()
    fresh = StackService(eng.store)
    fresh.resume_all()
    fresh.wait("s", 10)
    s = fresh.show("s")
    assert s["stack_status"] == "CREATE_FAILED"
    assert "interrupted by a restart of the undercloud service; Test::Fragile cannot resume safely" \
        in s["stack_status_reason"]
    # and the stack is not stuck: an update converges it
    assert eng.update("s", b)["stack_status"] == "UPDATE_COMPLETE"


def test_blocking_plugins_run_side_by_side(eng):
    Slow.most = 0
    s = eng.create("s", eng.bundle("t.yaml", template("Test::Slow", 6)))
    assert s["stack_status"] == "CREATE_COMPLETE"
    assert Slow.most > 1  # in the pool, not one after the other in the walk


def test_a_hung_blocking_call_times_out(eng):
    t = time.time()
    s = eng.create("s", eng.bundle("t.yaml", template("Test::Hung", 1)))
    assert time.time() - t < 2.5
    assert s["stack_status"] == "CREATE_FAILED"
    assert re.search(r"timed out after [01] s waiting for the hung call to answer", s["stack_status_reason"])
