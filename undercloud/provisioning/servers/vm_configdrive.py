"""First-boot data as an OpenStack config drive (ISO 9660, label `config-2`).

A VM gets it as a CD; the deploy ramdisk writes it as the last partition of a bare-metal
node's disk. On the node, `python3 -m undercloud.agent.first_boot` reads it (see
undercloud/agent/first_boot.py for the layout). The ISO holds the server's token: files are
written 0600, and the ISO is removed with the server.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
from pathlib import Path

from undercloud.agent.files import temp_name
from undercloud.host.labnet import LAB_NETWORK
from undercloud.host.run import require, run
from undercloud.provisioning.servers.base import Spec
from undercloud.provisioning.servers.vm_net import PREFIX

LABEL = "config-2"


def contents(spec: Spec, mac: str, address: str, prefix: int = PREFIX, gateway: str | None = None) -> dict[str, bytes]:
    """Relative path -> content of the config drive of `spec`; `gateway`: the node's router."""
    fb = dict(spec.first_boot or {})
    hostname = fb.get("hostname") or spec.name
    meta = {"uuid": spec.id, "name": spec.name, "hostname": hostname, "launch_index": 0,
            "availability_zone": "nova", "meta": fb.get("metadata") or {}}
    netmask = str(ipaddress.ip_network(f"0.0.0.0/{prefix}").netmask)
    network = {
        "links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": mac, "mtu": 1500}],
        "networks": [{"id": LAB_NETWORK, "link": "eth0", "type": "ipv4", "ip_address": address,
                      "netmask": netmask, "network_id": LAB_NETWORK,
                      "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": gateway}] if gateway else []}],
        "services": [],
    }
    agent = {**fb, "hostname": hostname, "server_id": fb.get("server_id") or spec.id}
    files = {
        "openstack/latest/meta_data.json": json.dumps(meta, indent=1).encode(),
        "openstack/latest/network_data.json": json.dumps(network, indent=1).encode(),
        "openstack/latest/vendor_data2.json": json.dumps({"undercloud": agent}, indent=1).encode(),
    }
    user_data = fb.get("user_data")
    if user_data:
        files["openstack/latest/user_data"] = user_data.encode() if isinstance(user_data, str) else user_data
    return files


def make(spec: Spec, mac: str, address: str, out: Path, prefix: int = PREFIX, gateway: str | None = None) -> Path:
    """Write the config drive ISO of `spec` to `out` (replacing it); returns `out`."""
    require("xorriso", "xorriso")
    # beside `out` (in the home, private), named as temporary: what a kill leaves of these
    # tokens is removed at the next start (files.remove_temps)
    tmp, partial = temp_name(out), temp_name(out)
    old = os.umask(0o077)
    try:
        tmp.mkdir(mode=0o700)
        for rel, data in contents(spec, mac, address, prefix, gateway).items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(partial), "-V", LABEL, "-J", "-r", str(tmp)],
            timeout=120)
        os.replace(partial, out)
    finally:
        os.umask(old)
        shutil.rmtree(tmp, ignore_errors=True)
        partial.unlink(missing_ok=True)
    return out
