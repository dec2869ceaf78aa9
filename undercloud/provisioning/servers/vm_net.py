"""The lab network as VM and bare-metal servers use it: addresses, MACs, the undercloud's side.

The network itself (libvirtd, its namespace, the bridge `br-<instance>` with the
undercloud's address `.1`) is the host's (`host/labnet.LabNetwork.up()`, which the virtual
lab uses too; made here when missing, recording nothing, so `lab up` still works after
it). Here:
- `Addresses`: lab addresses per server, rows of the store's address table
  (store/addresses.py, whose claims are safe across threads and processes). VM and
  bare-metal servers take theirs from labnet.SERVER_HOSTS; a requested `fixed_ip` is taken as asked.
- `serve_api`: the undercloud's API on the lab network. The bridge lives in libvirtd's
  namespace (its taps are made there) while the service runs in the host's, so
  `Env.listen` (which binds in the service's own namespace) cannot reach it: a socket is
  bound inside the lab namespace (`bind_in_netns`) at the bridge address and the API port,
  and each connection is relayed to the API's guest listener on GUEST_RELAY (a loopback
  address the realiser has served with `Env.listen`: guests' routes only, api/listeners.py),
  never to 127.0.0.1, where the whole API answers. Address and port are those of the home
  (the bridge's .1, the API port file): the same after restarts (`Realiser.startup`).
  The API sees the relay's loopback address; `relayed_peer` names the machine behind it
  (network boot answers only a node's own address: baremetal_netboot.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import ipaddress
import json
import os
import socket
import threading
from pathlib import Path

from undercloud.host.labnet import LAB_NETWORK, SERVER_HOSTS
from undercloud.provisioning.servers.base import RealiserError

PREFIX = 24
CLONE_NEWNET = 0x40000000
IP_FREEBIND = 15


def lab_network(home) -> tuple[str, str, str]:
    """(netns path, bridge, undercloud address) of this home's lab network, made if missing."""
    from undercloud.errors import UndercloudError
    from undercloud.host.labnet import LabNetwork

    net = LabNetwork(home.instance)
    try:
        ns, gateway = net.up()
    except UndercloudError as exc:
        raise RealiserError(f"lab network: {exc}") from None
    return ns, net.bridge, gateway


def server_mac(server_id: str) -> str:
    """A stable MAC per server in OpenStack's fa:16:3e range."""
    h = hashlib.sha256(server_id.encode()).digest()
    return f"fa:16:3e:{h[0]:02x}:{h[1]:02x}:{h[2]:02x}"


def lab_network_key(home) -> str:
    """The lab network's key in the address table (one per home)."""
    from undercloud.host.labnet import LabNetwork

    return LabNetwork(home.instance).address_key


class Addresses:
    """Lab addresses held by VM and bare-metal servers: rows of the store's address table
    (`env.addresses`), on the lab network's key. Servers take theirs from labnet.SERVER_HOSTS; on a
    configured provisioning network (`network`), from its DHCP range."""

    def __init__(self, home, subnet_gateway: str, table, network=None, inspection: bool = False):
        self.table = table
        self.gateway = subnet_gateway
        if network is not None:  # provisioning/network.ProvisioningNetwork
            pool = (inspection and network.inspection_pool) or network.pool
            self.network, self.net, self.pool = network.key, ipaddress.ip_network(network.cidr), list(pool)
            self.name = f"the provisioning network on {network.interface}"
            return
        self.network = lab_network_key(home)
        self.net = ipaddress.ip_interface(f"{subnet_gateway}/{PREFIX}").network
        self.pool = [str(self.net.network_address + h) for h in SERVER_HOSTS]
        self.name = LAB_NETWORK
        self._adopt_file(Path(home.path) / "servers" / "lab-addresses.json")

    def _adopt_file(self, file: Path) -> None:
        """Homes from before the table kept {address: server_id} in this file: its
        addresses go into the table once (then the file is renamed), so none is handed out twice."""
        try:
            held = json.loads(file.read_text())
        except (OSError, ValueError):
            return
        for address, server_id in held.items():
            self.table.adopt(self.network, server_id, address)
        try:
            file.rename(file.with_suffix(".json.imported"))
        except OSError:
            pass  # another thread did it

    def take(self, server_id: str, fixed_ip: str | None = None) -> str:
        """The server's address (the same one again when it holds one already)."""
        from undercloud.store.addresses import AddressTaken, NoFreeAddress

        if fixed_ip:
            try:
                ip = ipaddress.ip_address(fixed_ip)
            except ValueError:
                raise RealiserError(f"networks: fixed_ip {fixed_ip!r} is not an IP address") from None
            if ip not in self.net or ip in (self.net.network_address, self.net.broadcast_address) \
                    or str(ip) == self.gateway:
                raise RealiserError(f"networks: fixed_ip {fixed_ip} is not a free host address of "
                                    f"{self.name} ({self.net}; {self.gateway} is the undercloud)")
            try:
                return self.table.claim(self.network, server_id, exact=str(ip))
            except AddressTaken as exc:
                raise RealiserError(f"networks: fixed_ip {fixed_ip} is held by server {exc.holder}") from None
        mine = self.table.held(server_id)
        if mine is not None and mine[0] == self.network:
            return mine[1]
        try:
            return self.table.claim(self.network, server_id, self.pool)
        except NoFreeAddress:
            raise RealiserError(f"no free address left on {self.name} ({len(self.pool)} in use)") from None

    def release(self, server_id: str) -> list[str]:
        return self.table.release(server_id)

    def held(self, server_id: str | None = None) -> dict[str, str]:
        """{address: server id} of the servers on the lab network (an overcloud's VIP and a
        stack's port on ctlplane are none)."""
        from undercloud.store.addresses import is_server

        return {a: s for a, s in self.table.on(self.network).items()
                if is_server(s) and (server_id is None or s == server_id)}


def bind_in_netns(netns: str, host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port inside network namespace `netns` (a path such as
    /run/netns/NAME). The namespace switch happens in a short-lived thread, so the calling
    process stays where it is; the socket keeps the namespace it was made in."""
    out: dict = {}

    def work() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(netns, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err))
            finally:
                os.close(fd)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)  # the address may come after us
            s.bind((host, port))
            s.listen(128)
            out["sock"] = s
        except OSError as exc:
            out["error"] = exc

    t = threading.Thread(target=work, name="bind-in-netns")
    t.start()
    t.join()
    if "error" in out:
        raise RealiserError(f"cannot listen on {host}:{port} in {netns}: {out['error']}")
    return out["sock"]


_served: dict[tuple[str, str, int], socket.socket] = {}
_served_lock = threading.Lock()
GUEST_RELAY = "127.0.0.2"  # where relays lead: the API's guest-only listener on loopback
# The relay's own end of each relayed connection (its loopback address and port, what the
# API sees as the client) -> the address of the machine that connected in the namespace.
_peers: dict[tuple[str, int], str] = {}


def relayed_peer(host: str | None, port: int | None) -> str | None:
    """The address of the lab machine whose connection the relay passes on from the
    loopback `host`:`port` (what the API sees as its client); None for any other client."""
    return _peers.get((host or "", port or 0))


def serve_api(netns: str, host: str, port: int, to: str = GUEST_RELAY) -> None:
    """Relay host:port inside `netns` to the API on to:port (idempotent per process)."""
    key = (netns, host, port)
    with _served_lock:
        if key in _served:
            return
        sock = bind_in_netns(netns, host, port)
        _served[key] = sock
    threading.Thread(target=_accept, args=(sock, (to, port)), name=f"lab-api-{host}:{port}",
                     daemon=True).start()


def _accept(sock: socket.socket, target: tuple[str, int]) -> None:
    while True:
        try:
            conn, peer = sock.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(conn, target, peer[0]), name="lab-api-relay", daemon=True).start()


def _relay(conn: socket.socket, target: tuple[str, int], peer: str = "") -> None:
    try:
        up = socket.create_connection(target, timeout=10)
    except OSError:
        conn.close()
        return
    up.settimeout(None)
    for s in (conn, up):  # each record passed on at once: TLS writes several small ones an answer
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    mine = up.getsockname()[:2]
    _peers[mine] = peer  # before any byte is passed on: the API asks while it reads the request

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    _peers.pop(mine, None)
    conn.close()
    up.close()
