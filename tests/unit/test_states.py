"""The provision state machine, exhaustively from its declared table."""

import itertools

import pytest

from undercloud.errors import Conflict
from undercloud.provisioning import states

ALL_EVENTS = states.VERBS + states.EVENTS
PAIRS = list(itertools.product(states.STATES, ALL_EVENTS))


@pytest.mark.parametrize("state,event", PAIRS, ids=[f"{s}/{e}" for s, e in PAIRS])
def test_every_state_and_event(state, event):
    target = states.TRANSITIONS.get((state, event))
    if target is not None:
        assert states.next_state(state, event) == target
        return
    with pytest.raises(Conflict) as info:
        states.next_state(state, event, "n1")
    msg = str(info.value)
    assert f"cannot {event} node n1 in state '{state}'" in msg
    allowed = states.allowed_verbs(state)
    if allowed:
        assert f"allowed: {', '.join(allowed)}" in msg
    else:
        assert "no verb is allowed" in msg


def test_allowed_verbs_are_exactly_the_table_rows():
    for state in states.STATES:
        expected = {e for (s, e) in states.TRANSITIONS if s == state and e in states.VERBS}
        assert set(states.allowed_verbs(state)) == expected


def test_ironic_lifecycle_path():
    """enroll -> manageable -> inspected -> available -> active -> deleted -> available."""
    path = [("manage", "verifying"), ("done", "manageable"), ("inspect", "inspecting"), ("done", "manageable"),
            ("provide", "cleaning"), ("done", "available"), ("deploy", "deploying"), ("wait", "wait call-back"),
            ("done", "active"), ("undeploy", "deleting"), ("done", "cleaning"), ("done", "available")]
    state = "enroll"
    for event, expected in path:
        state = states.next_state(state, event)
        assert state == expected


def test_every_busy_and_wait_state_can_fail_and_has_a_timeout():
    for state in states.BUSY | states.WAIT:
        assert (state, "fail") in states.TRANSITIONS, state
        assert states.TIMEOUTS[state] > 0
    for state in states.WAIT:
        assert states.TRANSITIONS[(state, "abort")] in states.FAILED


def test_wrong_password_path_returns_to_enroll():
    assert states.next_state("verifying", "fail") == "enroll"


def test_every_state_is_reachable_from_enroll():
    seen, todo = {"enroll"}, ["enroll"]
    while todo:
        cur = todo.pop()
        for (src, _), dst in states.TRANSITIONS.items():
            if src == cur and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    assert seen == set(states.STATES)


def test_busy_states_refuse_every_verb_with_a_hint():
    for state in states.BUSY:
        assert states.allowed_verbs(state) == []
        with pytest.raises(Conflict, match="wait for the running work"):
            states.next_state(state, "manage")
