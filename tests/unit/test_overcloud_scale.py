"""Scale-in's drain of a compute node (overcloud/scale.py) against a stand-in for the
overcloud's Compute API: the order of its calls and how it waits. The e2e scale-in test on
the shared deployment is the real proof."""

from __future__ import annotations

import types

import pytest
from openstack.exceptions import ConflictException

from undercloud.overcloud import scale


class Compute:
    def __init__(self, conflicts: int):
        self.conflicts, self.calls = conflicts, []
        self.server = types.SimpleNamespace(id="i-1", name="vm3", compute_host="c-1")

    def servers(self, **kw):
        return [self.server]

    def delete_server(self, s):
        self.calls.append(("delete_server", s.id))

    def wait_for_delete(self, s, wait):
        self.calls.append(("wait_for_delete", s.id))

    def services(self, **kw):
        return [types.SimpleNamespace(id="svc-1")]

    def delete_service(self, svc):
        self.calls.append(("delete_service", svc.id))
        if self.conflicts:
            self.conflicts -= 1
            raise ConflictException("409: Unable to delete compute service that is hosting instances.")


def test_the_service_record_is_deleted_once_its_instances_are_done(monkeypatch):
    """Nova (2025.1) shows an instance DELETED, where the wait ends, while it still finishes
    on the host, and refuses the service's delete until then: asked again."""
    monkeypatch.setattr(scale.time, "sleep", lambda s: None)
    compute, said = Compute(conflicts=2), []
    scale.drain(types.SimpleNamespace(compute=compute), "c-1", said.append)
    assert compute.calls == [("delete_server", "i-1"), ("wait_for_delete", "i-1"), ("delete_service", "svc-1"),
                             ("delete_service", "svc-1"), ("delete_service", "svc-1")]
    assert said == ["scale-in: c-1: instance vm3 (i-1) deleted", "scale-in: c-1: its nova-compute service record deleted"]


def test_a_conflict_past_the_deadline_or_another_error_is_raised(monkeypatch):
    monkeypatch.setattr(scale.time, "sleep", lambda s: None)
    with pytest.raises(ConflictException):
        scale.drain(types.SimpleNamespace(compute=Compute(conflicts=1)), "c-1", lambda m: None, timeout=-1)
    compute = Compute(conflicts=0)
    compute.delete_service = lambda svc: (_ for _ in ()).throw(RuntimeError("500"))
    with pytest.raises(RuntimeError):
        scale.drain(types.SimpleNamespace(compute=compute), "c-1", lambda m: None)
