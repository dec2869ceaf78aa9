"""The per-deploy virtual media: the deploy ramdisk ISO plus this deploy's request, and the
short-lived HTTP server a BMC fetches it from.

Ironic builds a per-node ISO for Redfish virtual media too; here xorriso copies the deploy
ramdisk ISO (boot records replayed) and adds `undercloud/deploy.json` (where the image
is, the call-back token, the node's address, the root-device hints) and
`undercloud/configdrive.iso` (the server's first-boot data). The ramdisk reads them
(undercloud/agent/ramdisk.py). A BMC downloads virtual media when it is inserted, so the
file is served only for that call, on loopback, under a random path.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from undercloud.agent.files import temp_name, write_atomic
from undercloud.host.run import require, run

MEDIA_NAME = "deploy.iso"  # the name the BMC sees (sushy-tools names its copy after it)


def make_deploy_iso(base_iso: Path, request: dict, config_drive: Path | None, out: Path) -> Path:
    """`base_iso` + the request (and the config drive, for a deploy), written to `out` (mode 0600)."""
    require("xorriso", "xorriso")
    # temporary names (files.remove_temps clears what a kill leaves: both hold tokens)
    req, partial = temp_name(out.with_name("deploy.json")), temp_name(out)
    old = os.umask(0o077)
    try:
        write_atomic(req, json.dumps(request))
        extra = ["-map", str(config_drive), "/undercloud/configdrive.iso"] if config_drive else []
        run(["xorriso", "-indev", str(base_iso), "-outdev", str(partial), "-boot_image", "any", "replay",
             "-map", str(req), "/undercloud/deploy.json", *extra], timeout=300)
        os.replace(partial, out)
    finally:
        os.umask(old)
        req.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return out


@contextmanager
def serve_file(path: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """An HTTP URL for `path` while the block runs (one random path, GET and HEAD)."""
    secret = secrets.token_urlsafe(16)
    wanted = f"/{secret}/{MEDIA_NAME}"

    class Handler(BaseHTTPRequestHandler):
        def _head(self) -> bool:
            if self.path != wanted:
                self.send_error(404)
                return False
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            return True

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._head()

        def do_GET(self) -> None:  # noqa: N802
            if self._head():
                with open(path, "rb") as f:
                    shutil.copyfileobj(f, self.wfile, 1 << 20)

        def log_message(self, *_args) -> None:  # the URL holds the secret path: log nothing
            pass

    server = ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="deploy-media", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}{wanted}"
    finally:
        server.shutdown()
        server.server_close()
