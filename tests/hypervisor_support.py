"""An undercloud whose store a lab node can share, for hypervisor hosts (the e2e and
bench/hypervisor_bench.py): its lab network up first (the host's address there must exist
before the database listens on it), a throwaway PostgreSQL server on 127.0.0.1 and that
address (the node logs in with a password; pg_hba lets only the lab's /24 in), the service
on it listening on the lab address too (the node's worker fetches image content from it),
and an environment giving the example its UndercloudStoreUrl. UNDERCLOUD_HOME, _DB and
_LISTEN are set in this process while it lasts; everything is removed after.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests import pg_support

PASSWORD = "lab-store-pw-7f3a"  # the node's PostgreSQL password: must show nowhere
ENV_KEYS = ("UNDERCLOUD_HOME", "UNDERCLOUD_DB", "UNDERCLOUD_LISTEN")


@dataclass
class LabStore:
    home: object  # undercloud.config.Home
    lab: object  # undercloud.host.labnet.LabNetwork
    host_ip: str
    store_env: Path  # parameter_defaults: {UndercloudStoreUrl: ...}


def domains(instance: str) -> list[str]:
    p = subprocess.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"], capture_output=True, text=True)
    return [n for n in p.stdout.split() if n.startswith(f"{instance}-server-")]


def why_not() -> str | None:
    """Why this machine cannot run it, or None."""
    from undercloud.lab.lab import available

    if os.geteuid() != 0:
        return "needs root"
    return pg_support.why_not() or (f"VM nodes cannot run here: {why}" if (why := available()) else None)


@contextlib.contextmanager
def lab_store(root: Path, stacks: tuple[str, ...] = ()) -> Iterator[LabStore]:
    """`stacks`: deleted (`overcloud delete`) in this order at the end if they still exist."""
    from undercloud import daemon
    from undercloud.config import Home
    from undercloud.host.labnet import HOST_ADDRESS, LabNetwork

    home = Home(root / "home")
    lab = LabNetwork(home.instance)
    lab.up()
    host_ip = f"{lab.subnet}.{HOST_ADDRESS}"
    server = pg_support.Server(Path("/tmp"), listen=("127.0.0.1", host_ip),
                               hba=(f"host undercloud undercloud {lab.subnet}.0/24 scram-sha-256",))
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    try:
        server._admin(f"CREATE ROLE undercloud LOGIN PASSWORD '{PASSWORD}'")
        server._admin("CREATE DATABASE undercloud OWNER undercloud")
        os.environ.update(UNDERCLOUD_HOME=str(home.path),
                          UNDERCLOUD_DB=f"postgresql://undercloud:{PASSWORD}@127.0.0.1:{server.port}/undercloud",
                          UNDERCLOUD_LISTEN=host_ip)
        store_env = root / "store.yaml"
        store_env.write_text(yaml.safe_dump({"parameter_defaults": {
            "UndercloudStoreUrl": f"postgresql://undercloud:{PASSWORD}@{host_ip}:{server.port}/undercloud"}}))
        yield LabStore(home, lab, host_ip, store_env)
    finally:
        from tests.conftest import run_cli

        if home.file("port").exists():
            listed = run_cli("stack", "list", "-f", "json").stdout
            for stack in stacks:
                if f'"{stack}"' in listed:
                    run_cli("overcloud", "delete", "--stack", stack, "--yes", timeout=900)
        daemon.stop(home)
        server.stop()
        # what a failed test left on this host (its stack's delete failed or never ran): the
        # containers and lab network of this home's instance, so no later run meets them
        left = subprocess.run(["podman", "ps", "-aq", "--filter", f"label=undercloud.instance={home.instance}"],
                              capture_output=True, text=True).stdout.split()
        if left:
            subprocess.run(["podman", "rm", "-f", "-t", "0", *left], capture_output=True)
        for net in (f"{home.instance}-lab", f"{home.instance}-provider"):
            subprocess.run(["podman", "network", "rm", net], capture_output=True)
        for link in (f"{home.instance}-vx", f"{home.instance}-br"):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for name in domains(home.instance):
            subprocess.run(["virsh", "-c", "qemu:///system", "destroy", name], capture_output=True)
            subprocess.run(["virsh", "-c", "qemu:///system", "undefine", name, "--remove-all-storage"],
                           capture_output=True)
        lab.remove()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
