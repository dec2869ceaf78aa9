"""The contract between a container node and the service containers joined to it.

On a container node (provisioning/servers/container.py) the node is the container NODE
(`<instance>-<server>`), started with UNDERCLOUD_NODE_NETNS=container:NODE. Its agent's
kube hook (agent/netns.py) creates each Pod's containers through the host's
podman as `NODE-<pod>-<container>`, joined to NODE's network namespace and labelled
undercloud.node=NODE, undercloud.pod=NODE-<pod>, undercloud.container=<container>; a
persistentVolumeClaim is the volume `NODE-<claim>` (undercloud.node, undercloud.claim),
an emptyDir the volume `NODE-<pod>-<volume>` (undercloud.node, undercloud.pod).

Who relies on it: power (the node's service containers stop and start with it), delete
(they and its claim volumes go with it), both finding them by the label undercloud.node,
and status (the agent's watchdog reads each container's pod and name back from its
labels: a name cannot be split, as pod and container names hold dashes). Standard
library only: the agent imports it on the node.
"""

from __future__ import annotations

NODE_LABEL = "undercloud.node"            # the node container's name
POD_LABEL = "undercloud.pod"              # pod_prefix(node, pod)
CONTAINER_LABEL = "undercloud.container"  # the container's name in its Pod
CLAIM_LABEL = "undercloud.claim"          # a claim volume's claimName

NETNS_ENV = "UNDERCLOUD_NODE_NETNS"  # set on the node container: netns(NODE)
_NETNS = "container:"


def netns(node: str) -> str:
    """The value of NETNS_ENV for the node container `node` (podman's --network form)."""
    return f"{_NETNS}{node}"


def netns_node(value: str) -> str | None:
    """The node container named by a NETNS_ENV value; None when it names none."""
    return value[len(_NETNS):] if value.startswith(_NETNS) else None


def node_name(instance: str, server: str) -> str:
    """`<instance>-<server>`: the node container's name (provisioning adds `-<id[:8]>` when
    another server of the undercloud has the name)."""
    return f"{instance}-{server}"


def pod_prefix(node: str, pod: str) -> str:
    """`NODE-<pod>`: the POD_LABEL value of a Pod's containers and the start of their names."""
    return f"{node}-{pod}"


def container_name(node: str, pod: str, container: str) -> str:
    """`NODE-<pod>-<container>`: the name of a Pod's container on the node."""
    return f"{pod_prefix(node, pod)}-{container}"


def empty_dir_volume(node: str, pod: str, volume: str) -> str:
    """`NODE-<pod>-<volume>`: the named volume behind a Pod's emptyDir."""
    return f"{pod_prefix(node, pod)}-{volume}"


def claim_volume(node: str, claim: str) -> str:
    """`NODE-<claim>`: the named volume behind a persistentVolumeClaim on the node."""
    return f"{node}-{claim}"


def container_labels(node: str, pod: str, container: str) -> dict[str, str]:
    return {POD_LABEL: pod_prefix(node, pod), NODE_LABEL: node, CONTAINER_LABEL: container}


def empty_dir_labels(node: str, pod: str) -> dict[str, str]:
    return {NODE_LABEL: node, POD_LABEL: pod_prefix(node, pod)}


def claim_labels(node: str, claim: str) -> dict[str, str]:
    return {NODE_LABEL: node, CLAIM_LABEL: claim}


def pod_and_container(labels: dict, node: str) -> tuple[str, str] | None:
    """(pod, container) read back from a container's labels; None when it is not one of
    node's Pod containers."""
    prefix, container = labels.get(POD_LABEL, ""), labels.get(CONTAINER_LABEL)
    if container and prefix.startswith(node + "-"):
        return prefix[len(node) + 1:], container
    return None


def node_label(node: str) -> str:
    """`undercloud.node=NODE`: what the podman API's label filter takes to find the
    containers and volumes that belong to the node."""
    return f"{NODE_LABEL}={node}"


def pod_label(node: str, pod: str) -> str:
    """`undercloud.pod=NODE-<pod>`: the API's label filter for a Pod's containers."""
    return f"{POD_LABEL}={pod_prefix(node, pod)}"


def node_filter(node: str) -> str:
    """`label=undercloud.node=NODE`: the same as podman's --filter argument."""
    return f"label={node_label(node)}"
