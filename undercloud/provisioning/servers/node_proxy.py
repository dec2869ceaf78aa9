"""A container node's own view of the host's podman API: a filtering proxy per node.

A container node's kube hook drives the host's podman (agent/netns.py). Handed the
host's API socket, a compromised node would control every container and mount of the host.
Instead each node container mounts a directory of its own holding this proxy's socket
(`<home>/servers/podman-proxy/<node>/podman.sock`, as `/run/podman/podman.sock`), and the
proxy passes on only what the hook needs, on that node's own things:

- `_ping`, version and info;
- the container list, narrowed to the node's containers (`label=undercloud.node=NODE` added);
- a container by name or id (inspect, logs, exec, start, stop, restart, kill, wait, archive,
  delete) only when it is labelled undercloud.node=NODE; an exec session only one it made;
- creating a container only as a Pod of the node's deployments declares it (what the
  undercloud published for that node's agent, not what the node says): the name
  `NODE-<pod>-<container>`, its labels, NODE's network (and UTS) namespace and no other of
  the host's, host paths only the Pod's hostPath volumes at their mount paths, privileges and
  capabilities only as declared, named volumes only the node's own; nothing else in the body;
- volumes only the node's (`NODE-…`, labelled undercloud.node=NODE);
- images: exists; a load only of an archive the undercloud's image store holds (sha256), a
  tag only onto a name not taken (no image another node runs is replaced).

Anything else: 403 with the reason, logged. The node's report of a broken API service
(netns.api_recovered's file beside the socket) is passed on to the host's (`pass_reports`).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import logging
import os
import re
import shutil
import socketserver
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from undercloud.agent import engine, libpod, node_contract, pod_spec

log = logging.getLogger("undercloud.node_proxy")
SOCKET = "podman.sock"
PREFIX = re.compile(r"^/v[\d.]+/libpod(/.*)$")
CONTAINER_ACTIONS = {("GET", "json"), ("GET", "logs"), ("POST", "exec"), ("POST", "start"), ("POST", "stop"),
                     ("POST", "restart"), ("POST", "kill"), ("POST", "wait"), ("PUT", "archive")}
CREATE_KEYS = {"name", "image", "netns", "utsns", "labels", "env", "oci_runtime", "r_limits", "restart_policy",
               "mounts", "volumes", "cap_add", "cap_drop", "privileged", "entrypoint", "command"}
MAX_BODY = 16 << 20  # a JSON body or a config archive; an image archive is streamed to a file instead
CHUNK = 1 << 20


class Refused(Exception):
    """What the node may not do, in one line (the 403's message)."""


class Policy:
    """The rules for node `node`: `declared()` gives the Pods of its deployments (after
    their image overrides), `known_image(sha256)` whether an archive is the image store's,
    `upstream` is the host's API socket (for the labels of what a call names)."""

    def __init__(self, node: str, upstream: str, declared: Callable[[], list[dict]],
                 known_image: Callable[[str], bool]):
        self.node, self.upstream = node, upstream
        self.declared, self.known_image = declared, known_image
        self.execs: set[str] = set()  # exec sessions this node made
        self._lock = threading.Lock()

    # ---- what names a thing of the node's ---------------------------------------------
    def _labels(self, kind: str, name: str) -> dict | None:
        status, data = libpod.PodmanAPI(self.upstream).call("GET", f"/{kind}/{quote(name, safe='')}/json", timeout=30)
        if status != 200:
            return None
        info = json.loads(data or b"{}")
        return (info.get("Config") or {}).get("Labels") or info.get("Labels") or {}

    def _own(self, kind: str, name: str) -> None:
        labels = self._labels(kind, name)
        if labels is None:
            return  # missing: the host's 404 answers
        if labels.get(node_contract.NODE_LABEL) != self.node:
            raise Refused(f"{kind[:-1]} {name} is not one of node {self.node}'s")

    # ---- the rules ---------------------------------------------------------------------
    def check(self, method: str, path: str, query: dict[str, list[str]], body: bytes | None) -> str | None:
        """None when the call may go as it is, a new query string when it goes narrowed;
        Refused otherwise. `path` is after the /vX/libpod prefix."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if method == "GET" and parts in (["_ping"], ["version"], ["info"]):
            return None
        if parts[0] == "containers":
            return self._containers(method, parts, query, body)
        if parts[0] == "exec" and len(parts) == 3 and (method, parts[2]) in (("POST", "start"), ("GET", "json"),
                                                                             ("POST", "resize")):
            with self._lock:
                if parts[1] not in self.execs:
                    raise Refused(f"exec session {parts[1][:12]} was not made by node {self.node}")
            return None
        if parts[0] == "volumes":
            return self._volumes(method, parts, body)
        if parts[0] == "images":
            return self._images(method, parts, query)
        raise Refused(f"{method} {path} is not a call a node's kube hook makes")

    def _containers(self, method, parts, query, body) -> str | None:
        if method == "GET" and parts == ["containers", "json"]:
            filters = json.loads((query.get("filters") or ["{}"])[0] or "{}")
            if not isinstance(filters, dict):
                raise Refused("filters: a map")
            filters["label"] = [*(filters.get("label") or []), node_contract.node_label(self.node)]
            return urlencode({**{k: v[0] for k, v in query.items()}, "filters": json.dumps(filters)})
        if method == "POST" and parts == ["containers", "create"]:
            self._create(_json(body))
            return None
        if len(parts) == 2 and method == "DELETE" or len(parts) == 3 and (method, parts[2]) in CONTAINER_ACTIONS:
            self._own("containers", parts[1])
            return None
        raise Refused(f"{method} /{'/'.join(parts)} is not a call a node's kube hook makes")

    def _create(self, body: dict) -> None:
        extra = sorted(set(body) - CREATE_KEYS)
        if extra:
            raise Refused(f"container create: {', '.join(extra)} not allowed to a node")
        name = str(body.get("name") or "")
        found = next(((pod, c) for pod in self.declared() for c in (pod.get("spec") or {}).get("containers") or []
                      if node_contract.container_name(self.node, _pod_name(pod), c.get("name", "")) == name), None)
        if found is None:
            raise Refused(f"container {name or '(no name)'}: no Pod of node {self.node}'s deployments declares it")
        pod, c = found
        where = f"container {name}"
        if body.get("labels") != node_contract.container_labels(self.node, _pod_name(pod), c["name"]):
            raise Refused(f"{where}: labels other than the node's")
        own_ns = {"nsmode": "container", "value": self.node}
        if body.get("netns") != own_ns or body.get("utsns", own_ns) != own_ns:
            raise Refused(f"{where}: a namespace other than node {self.node}'s")
        if body.get("privileged") and not pod_spec.privileged(c):
            raise Refused(f"{where}: privileged, which its Pod does not declare")
        more = set(body.get("cap_add") or []) - set(pod_spec.capabilities(c, "add"))
        if more:
            raise Refused(f"{where}: capabilities {', '.join(sorted(more))}, which its Pod does not declare")
        volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        allowed = {((volumes.get(m.get("name")) or {}).get("hostPath") or {}).get("path"): m.get("mountPath")
                   for m in c.get("volumeMounts") or []}
        for m in body.get("mounts") or []:
            source, dest = m.get("source"), m.get("destination")
            if m.get("type") != "bind" or source not in allowed or allowed[source] != dest:
                raise Refused(f"{where}: host path {source} (at {dest}), which its Pod does not declare")
        for v in body.get("volumes") or []:
            vname = str(v.get("Name") or "")
            if not vname.startswith(f"{self.node}-"):
                raise Refused(f"{where}: volume {vname}, not one of node {self.node}'s")
            self._own("volumes", vname)

    def _volumes(self, method, parts, body) -> None:
        if method == "POST" and parts == ["volumes", "create"]:
            b = _json(body)
            name = str(b.get("Name") or "")
            if not name.startswith(f"{self.node}-") or (b.get("Label") or {}).get(node_contract.NODE_LABEL) != self.node:
                raise Refused(f"volume {name or '(no name)'}: a node makes only volumes of its own "
                              f"({self.node}-…, labelled {node_contract.node_label(self.node)})")
            if set(b) - {"Name", "Label"}:
                raise Refused(f"volume {name}: {', '.join(sorted(set(b) - {'Name', 'Label'}))} not allowed to a node")
            return
        if len(parts) == 3 and (method, parts[2]) in (("GET", "exists"), ("GET", "json")) or \
                len(parts) == 2 and method == "DELETE":
            if not parts[1].startswith(f"{self.node}-"):
                raise Refused(f"volume {parts[1]} is not one of node {self.node}'s")
            self._own("volumes", parts[1])
            return
        raise Refused(f"{method} /{'/'.join(parts)} is not a call a node's kube hook makes")

    def _images(self, method, parts, query) -> None:
        if method == "GET" and len(parts) == 3 and parts[2] == "exists":
            return
        if method == "POST" and parts == ["images", "load"]:
            return  # the archive is checked as it arrives (Handler._forward_archive)
        if method == "POST" and len(parts) == 3 and parts[2] == "tag":
            target = f"{(query.get('repo') or [''])[0]}:{(query.get('tag') or ['latest'])[0]}"
            status, _ = libpod.PodmanAPI(self.upstream).call("GET", f"/images/{quote(target, safe='')}/exists",
                                                           timeout=30)
            if status == 204:
                raise Refused(f"image {target} exists: a node does not move a name another may run")
            return
        raise Refused(f"{method} /{'/'.join(parts)} is not a call a node's kube hook makes")

    def made_exec(self, answer: bytes) -> None:
        try:
            exec_id = json.loads(answer).get("Id")
        except (ValueError, AttributeError):
            return
        if isinstance(exec_id, str):
            with self._lock:
                self.execs.add(exec_id)
                if len(self.execs) > 4096:  # bounded: probes make one every few seconds
                    self.execs.pop()


def _pod_name(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("name") or ""


def _json(body: bytes | None) -> dict:
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        raise Refused("the body is not JSON") from None
    if not isinstance(doc, dict):
        raise Refused("the body is not a JSON object")
    return doc


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # A node's agent probes its services through here, several at once (each exec probe is
    # 3-4 requests): socketserver's 5 pending connections overflowed under load, and a Unix
    # socket refuses the next connect at once (EAGAIN) instead of letting it wait.
    request_queue_size = 128
    policy: Policy
    upstream: str

    def handle_error(self, request, client_address) -> None:
        """A client gone before its answer (a probe's timeout, an agent stopped) is
        ordinary; anything else is logged once, without the request."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        log.warning("node %s: proxy error: %s: %s", self.policy.node, type(exc).__name__, exc)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # the refusals are logged; the rest is the hook's ordinary traffic

    def do_GET(self):  # noqa: N802 - http.server's names
        self._handle()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_GET

    def _handle(self) -> None:
        policy = self.server.policy
        url = urlsplit(self.path)
        m = PREFIX.match(url.path)
        try:
            if m is None:
                raise Refused(f"{self.command} {url.path}: only the libpod API is served to a node")
            query = parse_qs(url.query, keep_blank_values=True)
            if m.group(1) == "/images/load" and self.command == "POST":
                self._forward_archive(url)
                return
            body = self._body()
            narrowed = policy.check(self.command, m.group(1), query, body)
        except Refused as exc:
            log.warning("node %s refused: %s", policy.node, exc)
            self._answer(403, json.dumps({"cause": "refused", "message": f"node proxy: {exc}",
                                          "response": 403}).encode())
            return
        path = url.path + ("?" + (narrowed if narrowed is not None else url.query) if narrowed or url.query else "")
        status, headers, data = self._upstream(path, body)
        if status < 300 and self.command == "POST" and re.match(r"^/containers/[^/]+/exec$", m.group(1)):
            policy.made_exec(data)
        self._answer(status, data, headers.get("Content-Type", "application/json"))

    def _body(self) -> bytes | None:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise Refused(f"a body of {n} bytes (at most {MAX_BODY})")
        return self.rfile.read(n) if n else None

    def _forward_archive(self, url) -> None:
        """An image archive: to a file, hashed as it comes, then passed on only when the
        undercloud's image store holds that archive."""
        n = int(self.headers.get("Content-Length") or 0)
        digest = hashlib.sha256()
        with tempfile.TemporaryFile() as f:
            left = n
            while left > 0:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    break
                digest.update(chunk)
                f.write(chunk)
                left -= len(chunk)
            if left or not self.server.policy.known_image(digest.hexdigest()):
                raise Refused("an image archive the undercloud's image store does not hold")
            f.seek(0)
            status, headers, data = self._upstream(url.path + ("?" + url.query if url.query else ""), f,
                                                   {"Content-Length": str(n), "Content-Type": "application/x-tar"})
        self._answer(status, data, headers.get("Content-Type", "application/json"))

    def _upstream(self, path: str, body, headers: dict | None = None) -> tuple[int, dict, bytes]:
        sent = headers or {"Content-Type": self.headers.get("Content-Type") or "application/json"}
        try:
            return libpod.unix_request(self.server.upstream, self.command, path, body, sent, timeout=1800)
        except OSError as exc:
            return 502, {}, json.dumps({"message": f"node proxy: the host's podman API: {exc}"}).encode()

    def _answer(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class NodeProxy:
    """The proxy of node `node`: its socket in `directory` (made 0700, the socket 0600)."""

    def __init__(self, directory: Path, policy: Policy):
        self.directory = Path(directory)
        self.policy = policy
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = self.directory / SOCKET
        path.unlink(missing_ok=True)
        # bound through the directory's descriptor: a home's path may pass the 108 bytes a
        # socket's address holds
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.server = _Server(f"/proc/self/fd/{fd}/{SOCKET}", Handler)
        finally:
            os.close(fd)
        os.chmod(path, 0o600)
        self.server.policy, self.server.upstream = policy, policy.upstream
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"node-proxy-{policy.node}",
                                       daemon=True)
        self.thread.start()

    @property
    def socket_path(self) -> Path:
        return self.directory / SOCKET

    def stop(self, remove: bool = False) -> None:
        self.server.shutdown()
        self.server.server_close()
        if remove:
            shutil.rmtree(self.directory, ignore_errors=True)

    def pass_report(self, host_report: Path) -> bool:
        """Move the node's report of a broken API service (netns.api_recovered) to where the
        host's watch reads it; True when there was one."""
        mine = Path(str(self.socket_path) + engine.API_FAILED_SUFFIX)
        try:
            os.replace(mine, host_report)
            return True
        except FileNotFoundError:
            return False
