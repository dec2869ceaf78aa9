"""The libpod REST API over a Unix socket, with the standard library only: what a container
node's agent drives its host's podman with (netns mode), and the undercloud's node proxy."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import quote

from undercloud.agent.pod_spec import EngineFailure, PodError


def unix_connect(socket_path: str, timeout: float) -> socket.socket:
    """A stream socket connected to `socket_path`. A listener whose queue of connections
    not yet accepted is full (busy: many probes at once) refuses a connect with a timeout at
    once (EAGAIN, BlockingIOError) where a TCP one would wait: tried again until `timeout`."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        except BaseException:
            sock.close()
            raise


def unix_request(socket_path: str, method: str, path: str, body, headers: dict,
                 timeout: float) -> tuple[int, dict, bytes]:
    """One HTTP request over the Unix socket `socket_path`: (status, headers, body)."""
    import http.client

    class Conn(http.client.HTTPConnection):
        def connect(conn):  # noqa: N805 - the connection
            conn.sock = unix_connect(socket_path, timeout)

    conn = Conn("localhost", timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


class PodmanAPI:
    """The libpod REST API over a Unix socket (standard library only)."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    def call(self, method: str, path: str, body=None, raw=None, timeout: float = 120,
             headers: dict | None = None) -> tuple[int, bytes]:
        """`raw`: a tar, as bytes or an open file (streamed; give its Content-Length)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        sent = {"Content-Type": "application/x-tar" if raw is not None else "application/json", **(headers or {})}
        status, _headers, answer = unix_request(self.socket_path, method, "/v4.0.0/libpod" + path, data, sent,
                                                timeout)
        return status, answer

    def ok(self, method: str, path: str, body=None, raw: bytes | None = None, what: str = "") -> bytes:
        status, data = self.call(method, path, body, raw)
        if status >= 300:
            try:
                msg = json.loads(data).get("message") or data.decode()
            except ValueError:
                msg = data.decode(errors="replace")
            kind = EngineFailure if status >= 500 else PodError
            raise kind(f"podman API {what or path}: HTTP {status}: {msg.strip()[:300]}")
        return data

    def containers(self, label: str) -> list[dict]:
        filters = quote(json.dumps({"label": [label]}))
        return json.loads(self.ok("GET", f"/containers/json?all=true&filters={filters}") or b"[]")

    def logs_tail(self, name: str, lines: int = 20) -> str:
        status, data = self.call("GET", f"/containers/{name}/logs?stdout=true&stderr=true&tail={lines}")
        if status >= 300:
            return ""
        return demux(data)

    def exec(self, name: str, argv: list[str], timeout: float) -> tuple[int, str]:
        """Run argv inside container `name` (exec create + start, attached); (exit code, output)."""
        data = self.ok("POST", f"/containers/{name}/exec",
                       {"Cmd": argv, "AttachStdout": True, "AttachStderr": True}, what=f"exec in {name}")
        exec_id = json.loads(data)["Id"]
        status, out = self.call("POST", f"/exec/{exec_id}/start", {"Detach": False, "Tty": False}, timeout=timeout)
        if status >= 300:
            raise PodError(f"podman API exec in {name}: HTTP {status}: {demux(out).strip()[:300]}")
        for _ in range(20):  # the session's state may trail the end of its output a little
            info = json.loads(self.ok("GET", f"/exec/{exec_id}/json"))
            if not info.get("Running"):
                return int(info.get("ExitCode", -1)), demux(out)
            time.sleep(0.05)
        return -1, demux(out)


def demux(data: bytes) -> str:
    """The text of a multiplexed stream (logs, attached exec): frames of 1 byte stream,
    3 zero bytes, 4 bytes big-endian size; anything else is taken as plain text."""
    out, i = [], 0
    while i + 8 <= len(data) and data[i] in (0, 1, 2) and data[i + 1:i + 4] == b"\0\0\0":
        size = int.from_bytes(data[i + 4:i + 8], "big")
        out.append(data[i + 8:i + 8 + size])
        i += 8 + size
    return (b"".join(out) if out else data).decode(errors="replace")


def config_tar(mounts: list[tuple[str, dict]]) -> bytes:
    """A tar of the ConfigMap files at their mount paths (directories made, readable)."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        made = set()
        for mount_path, data in mounts:
            parts = [x for x in mount_path.strip("/").split("/") if x]
            for n in range(1, len(parts) + 1):
                d = "/".join(parts[:n])
                if d not in made:
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                    made.add(d)
            for key, value in (data or {}).items():
                blob = str(value).encode()
                info = tarfile.TarInfo("/".join([*parts, key]))
                info.size, info.mode = len(blob), 0o644
                tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()
