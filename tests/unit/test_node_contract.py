"""The node <-> service container contract (agent/node_contract.py): its names, labels and
filters, and that the package spells the labels nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import undercloud
from undercloud.agent import node_contract as nc

ROOT = Path(undercloud.__file__).parent
LABELS = (nc.NODE_LABEL, nc.POD_LABEL, nc.CONTAINER_LABEL, nc.CLAIM_LABEL)


def test_the_spelling_the_hosts_and_nodes_already_have():
    # Containers and volumes made by an earlier version carry these: they must not change.
    assert (nc.NODE_LABEL, nc.POD_LABEL, nc.CONTAINER_LABEL, nc.CLAIM_LABEL) == (
        "undercloud.node", "undercloud.pod", "undercloud.container", "undercloud.claim")
    assert nc.NETNS_ENV == "UNDERCLOUD_NODE_NETNS"
    assert nc.node_name("uc1", "ctl-0") == "uc1-ctl-0"
    assert nc.container_name("uc1-ctl-0", "nova-api", "api") == "uc1-ctl-0-nova-api-api"
    assert nc.claim_volume("uc1-ctl-0", "mysql-data") == "uc1-ctl-0-mysql-data"
    assert nc.empty_dir_volume("uc1-ctl-0", "web", "scratch") == "uc1-ctl-0-web-scratch"


def test_filters():
    assert nc.node_label("uc1-ctl-0") == "undercloud.node=uc1-ctl-0"
    assert nc.node_filter("uc1-ctl-0") == "label=undercloud.node=uc1-ctl-0"
    assert nc.pod_label("uc1-ctl-0", "keystone") == "undercloud.pod=uc1-ctl-0-keystone"


def test_a_container_round_trips_through_its_labels():
    node = nc.node_name("uc1", "ctl-0")
    labels = nc.container_labels(node, "nova-api", "api-proxy")
    assert labels == {"undercloud.pod": "uc1-ctl-0-nova-api", "undercloud.node": node,
                      "undercloud.container": "api-proxy"}
    assert nc.pod_and_container(labels, node) == ("nova-api", "api-proxy")
    assert nc.container_name(node, *nc.pod_and_container(labels, node)) == "uc1-ctl-0-nova-api-api-proxy"
    # a prefix match, as it always was: the node label filter is what picks the node's
    assert nc.pod_and_container(labels, "uc1-ctl") == ("0-nova-api", "api-proxy")
    assert nc.pod_and_container(labels, "uc1-other") is None
    assert nc.pod_and_container({nc.POD_LABEL: "uc1-ctl-0-x"}, node) is None  # no container label
    assert nc.pod_and_container(nc.empty_dir_labels(node, "web"), node) is None  # a volume's


def test_volume_labels():
    assert nc.claim_labels("n", "data") == {"undercloud.node": "n", "undercloud.claim": "data"}
    assert nc.empty_dir_labels("n", "web") == {"undercloud.node": "n", "undercloud.pod": "n-web"}


def test_netns_round_trip():
    assert nc.netns("uc1-ctl-0") == "container:uc1-ctl-0"
    assert nc.netns_node(nc.netns("uc1-ctl-0")) == "uc1-ctl-0"
    assert nc.netns_node("host") is None
    assert nc.netns_node("") is None


def spelled(path: Path) -> list[str]:
    """The contract's keys spelled in code (string literals and f-string parts; docstrings,
    comments and messages may name them): a label as a whole string or as LABEL=, the
    environment variable as a whole string or as NAME=container:{...}."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            if (any(n.value == k or f"{k}=" in n.value for k in LABELS) or n.value == nc.NETNS_ENV
                    or n.value.endswith(f"{nc.NETNS_ENV}={nc.netns('')}")):
                found.append(f"{path.relative_to(ROOT.parent)}:{n.lineno}: {n.value!r}")
    return found


def test_only_the_contract_spells_the_labels():
    others = [p for p in ROOT.rglob("*.py") if p != Path(nc.__file__)]
    assert len(others) > 100  # the whole package was read
    assert [hit for p in others for hit in spelled(p)] == []
