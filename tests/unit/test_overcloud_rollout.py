"""`overcloud update` / `overcloud rollback` / `overcloud replace`: deployed sets, which
parameters change, the progress read from the engine's events, and bad input (one line,
nothing changed)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from undercloud.cli.client import Client
from undercloud.errors import InvalidInput
from undercloud.overcloud import deployed, rollout
from undercloud.overcloud.state import StackState


def a_set(**refs) -> dict:
    services = {"KeystoneImage": ["keystone"], "NovaImage": ["nova-api", "nova-conductor"]}
    return {"hypervisor": "vm", "at": 0, "images": {
        p: {"name": p.lower(), "ref": ref, "id": f"id-{ref}", "services": services[p]} for p, ref in refs.items()}}


def kept_state(uc_home, stack: str = "overcloud") -> StackState:
    return StackState(Client(uc_home), stack)


def test_a_deploy_that_changes_no_image_keeps_the_set_to_roll_back_to(uc_home):
    state = kept_state(uc_home, "oc")
    deployed.record(state, a_set(KeystoneImage="k1", NovaImage="n1"))
    assert "previous" not in deployed.load(state)
    deployed.record(state, a_set(KeystoneImage="k2", NovaImage="n1"))
    deployed.record(state, a_set(KeystoneImage="k2", NovaImage="n1"))  # e.g. a drift repair
    sets = deployed.load(kept_state(uc_home, "oc"))  # as the store has them
    assert deployed.refs(sets["previous"]) == {"KeystoneImage": "k1", "NovaImage": "n1"}
    assert deployed.refs(sets["current"]) == {"KeystoneImage": "k2", "NovaImage": "n1"}
    deployed.record(kept_state(uc_home, "other"), a_set(KeystoneImage="k7", NovaImage="n1"))
    every = Client(uc_home).get("/v1/overcloud-state", params={"name": deployed.NAME})
    assert sorted(every) == ["oc", "other"]
    assert deployed.kept(every.values()) == ["k1", "k2", "k7", "n1"]


def test_set_parameters_name_the_images_and_where_nodes_load_them():
    s = a_set(KeystoneImage="k2", NovaImage="n1")
    assert deployed.parameters(s, ["KeystoneImage"]) == {
        "KeystoneImage": "k2", "ServiceImageSources": {"k2": "/v1/images/id-k2/file", "n1": "/v1/images/id-n1/file"}}
    assert deployed.parameters({**s, "hypervisor": "container"}, ["NovaImage"]) == {"NovaImage": "n1"}


def test_choose_by_service_and_what_changed():
    cur = a_set(KeystoneImage="k1", NovaImage="n1")
    assert rollout.choose(cur, []) == ["KeystoneImage", "NovaImage"]
    assert rollout.choose(cur, ["nova-conductor"]) == ["NovaImage"]
    with pytest.raises(InvalidInput) as exc:
        rollout.choose(cur, ["keystone", "glance"])
    assert exc.value.where == "--service"
    assert "no deployed service glance" in exc.value.message and "keystone, nova-api" in exc.value.message
    records = {"keystoneimage": {"id": "new", "properties": {"podman_image": "k9"}},
               "novaimage": {"id": "id-n1", "properties": {"podman_image": "n1"}}}
    new = rollout.with_records(cur, ["KeystoneImage", "NovaImage"], records)
    assert rollout.changed(cur, new) == ["KeystoneImage"]
    assert new["images"]["KeystoneImage"] == {"name": "keystoneimage", "ref": "k9", "id": "new",
                                              "services": ["keystone"]}
    assert cur["images"]["KeystoneImage"]["ref"] == "k1"  # the current set is left as it was


def test_a_roles_own_image_is_an_override_of_the_sets():
    """`update --role`: the role's nodes run the new image (`<Role>ImageOverrides` maps the
    set's reference to it); an update of every role, or a role given the set's image again,
    ends the override; a deploy keeps overrides whose base image it still runs."""
    cur = a_set(KeystoneImage="k1", NovaImage="n1")
    roles = {"Compute": {"nova-api"}, "Controller": {"keystone", "nova-api", "nova-conductor"}}
    assert rollout.choose(cur, [], {"Compute": roles["Compute"]}) == ["NovaImage"]
    assert rollout.choose(cur, ["keystone"], {"Controller": roles["Controller"]}) == ["KeystoneImage"]
    with pytest.raises(InvalidInput) as exc:
        rollout.choose(cur, ["keystone"], {"Compute": roles["Compute"]})
    assert (exc.value.where, exc.value.message) == ("--role", "role Compute runs no keystone (it runs: nova-api)")
    records = {"novaimage": {"id": "id-n2", "properties": {"podman_image": "n2"}}}
    new = rollout.with_records(cur, ["NovaImage"], records, ["Compute"])
    assert rollout.changed(cur, new) == ["Compute:NovaImage"]
    assert new["images"] == cur["images"] and new["overrides"]["Compute"]["NovaImage"]["ref"] == "n2"
    assert deployed.parameters(new, [], ["Compute", "Controller"]) == {
        "ComputeImageOverrides": {"n1": "n2"}, "ControllerImageOverrides": {},
        "ServiceImageSources": {"k1": "/v1/images/id-k1/file", "n1": "/v1/images/id-n1/file",
                                "n2": "/v1/images/id-n2/file"}}
    assert deployed.refs(new) == {"KeystoneImage": "k1", "NovaImage": "n1", "Compute:NovaImage": "n2"}
    # A deploy keeps it while the set's nova image is still n1; roles that are gone lose theirs.
    assert deployed.kept_overrides(new, {"NovaImage": "n1"}, ["Compute"]) == new["overrides"]
    assert deployed.kept_overrides(new, {"NovaImage": "n3"}, ["Compute"]) == {}
    assert deployed.kept_overrides(new, {"NovaImage": "n1"}, ["Controller"]) == {}
    # The role back on the set's image: no override; every role updated: none either.
    back = rollout.with_records(new, ["NovaImage"], {"novaimage": {"id": "id-n1", "properties": {
        "podman_image": "n1"}}}, ["Compute"])
    assert back["overrides"] == {} and rollout.changed(new, back) == ["Compute:NovaImage"]
    everywhere = rollout.with_records(new, ["NovaImage"], records)
    assert everywhere["overrides"] == {} and everywhere["images"]["NovaImage"]["ref"] == "n2"
    assert rollout.changed(new, everywhere) == ["Compute:NovaImage", "NovaImage"]


def test_follow_says_per_node_and_step_and_keeps_the_first_failure():
    said = []
    f = rollout.Follow(lambda *_a, **_k: [], "oc", said.append, 0)
    reason = ("Error: resources[0]: Deployment exited with non-zero status code: 1 (pod keystone: container "
              "keystone: readiness probe (GET :5000/v3) exited | last lines of its log: | boom | bye)")
    for name, status, why in [
            ("ControllerDeployment_Step3.oc-controller-0", "UPDATE_IN_PROGRESS", ""),
            ("ControllerDeployment_Step3.oc-controller-0", "UPDATE_FAILED", reason),
            ("ControllerDeployment_Step3", "UPDATE_FAILED", "nested failure"),
            ("oc", "ROLLBACK_IN_PROGRESS", "Stack ROLLBACK started: ..."),
            ("ControllerDeployment_Step3.oc-controller-0", "UPDATE_IN_PROGRESS", ""),
            ("ControllerDeployment_Step3.oc-controller-0", "UPDATE_COMPLETE", "")]:
        f.event({"resource_name": name, "resource_status": status, "resource_status_reason": why})
    assert f.failure == ("oc-controller-0",
                         "step 3: pod keystone: container keystone: readiness probe (GET :5000/v3) exited",
                         ["boom", "bye"])
    assert f.nodes == {"oc-controller-0": "rolled back"}
    lines = [x.split("] ", 1)[1] for x in said]
    assert lines == ["oc-controller-0: step 3 running",
                     "oc-controller-0: step 3 failed: pod keystone: container keystone: readiness probe "
                     "(GET :5000/v3) exited",
                     "rolling back what changed to the previous images and configuration",
                     "oc-controller-0: step 3 (rollback) running",
                     "oc-controller-0: step 3 (rollback) healthy"]


def test_follow_keeps_the_nodes_rolled_back_within_max_fail_apart_from_the_failure():
    said = []
    f = rollout.Follow(lambda *_a, **_k: [], "oc", said.append, 0)
    why = "Deployment to server failed: deploy_status_code : 3 (pod keystone: container keystone: exited)"
    step3, step4 = "ControllerDeployment_Step3.", "ControllerDeployment_Step4."
    for name, status, reason in [
            (step3 + "c-0", "UPDATE_IN_PROGRESS", ""),
            (step3 + "c-0", "UPDATE_FAILED", why),
            (step3 + "c-0", "ROLLBACK_IN_PROGRESS", "rolling back to its previous properties: " + why),
            (step3 + "c-0", "ROLLBACK_COMPLETE", "rolled back to its previous properties after: " + why),
            (step3 + "c-1", "UPDATE_IN_PROGRESS", ""),
            (step3 + "c-1", "UPDATE_COMPLETE", ""),
            (step4 + "c-0", "ROLLBACK_COMPLETE", "not updated: its server s-0 failed earlier in this update"),
            (step4 + "c-1", "UPDATE_COMPLETE", "")]:
        f.event({"resource_name": name, "resource_status": status, "resource_status_reason": reason})
    assert f.failure is None
    assert list(f.tolerated) == ["c-0"] and f.tolerated["c-0"][0].startswith("step 3: ")
    assert f.nodes == {"c-0": "held back", "c-1": "updated"}
    lines = [x.split("] ", 1)[1] for x in said]
    assert lines[2:4] == ["c-0: step 3 rolling back to its previous images and configuration",
                          "c-0: step 3 rolled back: healthy on its previous images"]
    assert "c-0: step 4 not run (the node failed an earlier step)" in lines
    # one more node failing is the failure, and the stack's rollback follows
    f.event({"resource_name": step4 + "c-1", "resource_status": "UPDATE_FAILED", "resource_status_reason": why})
    assert f.failure[0] == "c-1" and list(f.tolerated) == ["c-0"]


@pytest.mark.parametrize("args, message", [
    (["update"], "no overcloud stack 'overcloud': run `undercloud deploy`"),
    (["update", "--batch", "0"], "Invalid value for '--batch'"),
    (["update", "--max-fail", "-1"], "Invalid value for '--max-fail'"),
    (["rollback", "--stack", "nope"], "no overcloud stack 'nope'"),
    (["replace", "overcloud-controller-0", "--yes"], "no overcloud stack 'overcloud': run `undercloud deploy`"),
    (["replace"], "Missing argument 'NODE'"),
])
def test_update_and_rollback_bad_input_is_one_line(uc_home, args, message):
    r = run_cli("overcloud", *args)
    assert r.returncode != 0
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_update_without_a_recorded_set_and_rollback_without_a_previous_one(uc_home, tmp_path):
    (tmp_path / "t.yaml").write_text("heat_template_version: 2018-08-31\nresources: {}\n")
    assert run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "--wait").returncode == 0
    r = run_cli("overcloud", "update", "--service", "keystone")
    assert r.returncode == 1 and "no deployed set recorded for stack overcloud" in r.stderr, r.stderr
    deployed.record(kept_state(uc_home), a_set(KeystoneImage="k1", NovaImage="n1"))
    r = run_cli("overcloud", "rollback")
    assert r.returncode == 1 and "no previous deployed set" in r.stderr, r.stderr
    r = run_cli("overcloud", "update", "--service", "glance")
    assert r.returncode == 1 and "--service: no deployed service glance" in r.stderr, r.stderr
    deployed.record(kept_state(uc_home), a_set(KeystoneImage="k2", NovaImage="n1"))
    r = run_cli("overcloud", "rollback")  # the previous set's image is not in the store
    assert r.returncode == 1 and "image keystoneimage (k1) of the previous set is no longer in the image store" \
        in r.stderr, r.stderr
    assert json.loads(run_cli("stack", "show", "overcloud", "-f", "json").stdout)["stack_status"] == "CREATE_COMPLETE"


def test_events_are_paged_by_id_to_the_end():
    """2,500 events come in pages of 1,000 after the id asked for, none twice or missed."""
    stored = [{"id": i, "resource_name": f"r{i}", "resource_status": "CREATE_COMPLETE"} for i in range(1, 2501)]
    asked = []

    def get(url, params):
        asked.append(params["after"])
        return [e for e in stored if e["id"] > params["after"]][:params["limit"]]

    assert [e["id"] for e in rollout.events(get, "oc", 0)] == list(range(1, 2501))
    assert asked == [0, 1000, 2000]
    assert rollout.last_event(get, "oc") == 2500
    assert [e["id"] for e in rollout.events(get, "oc", 2498)] == [2499, 2500]


def test_replace_names_the_nodes_it_knows_and_asks_first(uc_home, tmp_path):
    (tmp_path / "t.yaml").write_text(
        "heat_template_version: 2018-08-31\nresources: {}\noutputs:\n  RoleNodes:\n"
        "    value: {Controller: {oc-controller-0: 192.0.2.5}, Compute: {oc-compute-0: 192.0.2.6}}\n")
    assert run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "--wait").returncode == 0
    r = run_cli("overcloud", "replace", "oc-controller-9", "--yes")
    assert r.returncode == 1, r.stderr
    assert "NODE: no node 'oc-controller-9' in overcloud overcloud (its nodes: oc-compute-0, oc-controller-0)" \
        in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = run_cli("overcloud", "replace", "oc-controller-0", input="n\n")
    assert r.returncode == 1 and "Replace oc-controller-0 (Controller, 192.0.2.5) by a new node?" in r.stderr
    assert "not confirmed" in r.stderr and "rebuilding" not in r.stderr, r.stderr


def test_update_role_bad_input_names_the_roles_and_what_they_run(uc_home, tmp_path):
    (tmp_path / "t.yaml").write_text(
        "heat_template_version: 2018-08-31\nresources: {}\noutputs:\n  RoleServices:\n"
        "    value: {Controller: [[keystone, 3, 'HTTP GET :15000/v3']], Compute: [[nova-api, 4, 'x']]}\n")
    assert run_cli("stack", "create", "overcloud", "-t", str(tmp_path / "t.yaml"), "--wait").returncode == 0
    deployed.record(kept_state(uc_home), a_set(KeystoneImage="k1", NovaImage="n1"))
    r = run_cli("overcloud", "update", "--role", "Database")
    assert r.returncode == 1 and "--role: no role Database in overcloud overcloud (its roles: Compute, Controller)" \
        in r.stderr, r.stderr
    r = run_cli("overcloud", "update", "--role", "Compute", "--service", "keystone")
    assert r.returncode == 1 and "--role: role Compute runs no keystone (it runs: nova-api)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "images: building" not in r.stderr
