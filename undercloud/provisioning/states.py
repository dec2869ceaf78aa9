"""The node provision state machine, as Ironic declares it: ONE transition table.

Everything else (the nodes service, the API, the CLI's `--wait`, the tests) reads this
table; there are no state `if` chains elsewhere. Events are either user verbs (what an
operator or the servers layer asks for) or internal events the service fires when work
finishes (`done`, `wait`, `fail`, ...).
"""

from __future__ import annotations

from undercloud.errors import Conflict

ENROLL = "enroll"
VERIFYING = "verifying"
MANAGEABLE = "manageable"
INSPECTING = "inspecting"
INSPECT_WAIT = "inspect wait"
INSPECT_FAILED = "inspect failed"
CLEANING = "cleaning"
CLEAN_WAIT = "clean wait"
CLEAN_FAILED = "clean failed"
AVAILABLE = "available"
DEPLOYING = "deploying"
DEPLOY_WAIT = "wait call-back"
DEPLOY_FAILED = "deploy failed"
ACTIVE = "active"
DELETING = "deleting"
ERROR = "error"

# Verbs people (and the servers layer) may send; the rest are internal events.
VERBS = ("manage", "inspect", "provide", "clean", "deploy", "undeploy", "rebuild", "abort")
# `done-manual`: manual cleaning (`clean`) finished; goes back to manageable, not available.
EVENTS = ("done", "done-manual", "wait", "fail")

# (source state, event) -> target state. The whole lifecycle.
TRANSITIONS: dict[tuple[str, str], str] = {
    (ENROLL, "manage"): VERIFYING,
    (VERIFYING, "done"): MANAGEABLE,
    (VERIFYING, "fail"): ENROLL,

    (MANAGEABLE, "inspect"): INSPECTING,
    (MANAGEABLE, "provide"): CLEANING,
    (MANAGEABLE, "clean"): CLEANING,

    (INSPECTING, "done"): MANAGEABLE,
    (INSPECTING, "wait"): INSPECT_WAIT,
    (INSPECTING, "fail"): INSPECT_FAILED,
    (INSPECT_WAIT, "done"): MANAGEABLE,
    (INSPECT_WAIT, "fail"): INSPECT_FAILED,
    (INSPECT_WAIT, "abort"): INSPECT_FAILED,
    (INSPECT_FAILED, "inspect"): INSPECTING,
    (INSPECT_FAILED, "manage"): MANAGEABLE,

    (CLEANING, "done"): AVAILABLE,
    (CLEANING, "done-manual"): MANAGEABLE,
    (CLEANING, "wait"): CLEAN_WAIT,
    (CLEANING, "fail"): CLEAN_FAILED,
    (CLEAN_WAIT, "done"): AVAILABLE,
    (CLEAN_WAIT, "done-manual"): MANAGEABLE,
    (CLEAN_WAIT, "fail"): CLEAN_FAILED,
    (CLEAN_WAIT, "abort"): CLEAN_FAILED,
    (CLEAN_FAILED, "manage"): MANAGEABLE,

    (AVAILABLE, "deploy"): DEPLOYING,
    (AVAILABLE, "manage"): MANAGEABLE,

    (DEPLOYING, "done"): ACTIVE,
    (DEPLOYING, "wait"): DEPLOY_WAIT,
    (DEPLOYING, "fail"): DEPLOY_FAILED,
    (DEPLOY_WAIT, "done"): ACTIVE,
    (DEPLOY_WAIT, "fail"): DEPLOY_FAILED,
    (DEPLOY_WAIT, "abort"): DEPLOY_FAILED,
    (DEPLOY_FAILED, "deploy"): DEPLOYING,
    (DEPLOY_FAILED, "rebuild"): DEPLOYING,
    (DEPLOY_FAILED, "undeploy"): DELETING,

    (ACTIVE, "rebuild"): DEPLOYING,
    (ACTIVE, "undeploy"): DELETING,

    (DELETING, "done"): CLEANING,   # automated cleaning follows tear-down, then available
    (DELETING, "fail"): ERROR,
    (ERROR, "rebuild"): DEPLOYING,
    (ERROR, "undeploy"): DELETING,
}

# States where work runs in the service; power changes and deletion wait for it.
BUSY = frozenset({VERIFYING, INSPECTING, CLEANING, DEPLOYING, DELETING})
# States where the node waits for something outside (a ramdisk, an agent's call-back).
WAIT = frozenset({INSPECT_WAIT, CLEAN_WAIT, DEPLOY_WAIT})
FAILED = frozenset({INSPECT_FAILED, CLEAN_FAILED, DEPLOY_FAILED, ERROR})
STATES = tuple(dict.fromkeys([s for s, _ in TRANSITIONS] + list(TRANSITIONS.values())))
STABLE = frozenset(STATES) - BUSY - WAIT
# A node may leave the inventory only where nothing uses or works on it.
DELETE_ALLOWED = frozenset({ENROLL, MANAGEABLE, AVAILABLE, INSPECT_FAILED, CLEAN_FAILED})

# Seconds a node may stay in a busy or wait state before it fails with a reason.
TIMEOUTS: dict[str, float] = {
    VERIFYING: 300, INSPECTING: 900, INSPECT_WAIT: 1800, CLEANING: 1800, CLEAN_WAIT: 1800,
    DEPLOYING: 1800, DEPLOY_WAIT: 3600, DELETING: 900,
}


def allowed_verbs(state: str) -> list[str]:
    """The user verbs accepted in `state`, in VERBS order."""
    return [v for v in VERBS if (state, v) in TRANSITIONS]


def next_state(state: str, event: str, node: str = "node") -> str:
    """The state after `event`; refuses an event the table does not allow in `state`."""
    target = TRANSITIONS.get((state, event))
    if target is None:
        allowed = allowed_verbs(state)
        hint = f"allowed: {', '.join(allowed)}" if allowed else "no verb is allowed in this state"
        if state in BUSY:
            hint += "; wait for the running work to finish"
        raise Conflict(f"cannot {event} node {node} in state '{state}' ({hint})")
    return target


def is_stable(state: str) -> bool:
    return state in STABLE
