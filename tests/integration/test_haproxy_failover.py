"""haproxy for real: the built service-haproxy image (the default release's, haproxy 3.0 on
Debian 13) running the configuration services/haproxy.yaml makes for the database.

A node lost whole answers nothing: connections made to its MariaDB before haproxy's checks
mark it down wait on a connect that never completes. Each must reach the backup server and
its greeting. With `on-marked-down shutdown-sessions` haproxy 3.0 left every such connection
open with no server behind it, for good (the ha e2e's services waited minutes after losing
the VIP holder).

One container with no network (--network none): the two servers live on its own loopback
(127.0.0.2, 127.0.0.3), so nothing leaves it. Needs root and podman (skips otherwise).
"""

from __future__ import annotations

import json
import subprocess

from tests.conftest import need, need_root, run_cli
from tests.unit import service_support

# In the container: the lost active server (a full accept queue drops SYNs, as a vanished host
# does; its check passes for 6 s, then fails), the backup (greets at once), haproxy, and five
# clients connecting 1.5 s apart while the first is not yet marked down.
SCENARIO = r"""
import json, socket, subprocess, threading, time
from http.server import BaseHTTPRequestHandler, HTTPServer

t0 = time.monotonic()
silent = socket.socket()
silent.bind(("127.0.0.2", 13306))
silent.listen(0)
queued = []
for _ in range(3):
    s = socket.socket(); s.setblocking(False)
    try:
        s.connect(("127.0.0.2", 13306))
    except BlockingIOError:
        pass
    queued.append(s)

def greet():
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.3", 13306)); srv.listen(50)
    while True:
        c, _ = srv.accept(); c.sendall(b"greeting from the backup\n")

class Check(BaseHTTPRequestHandler):
    def do_GET(self):
        up = self.server.server_address[0] == "127.0.0.3" or time.monotonic() - t0 < 6
        self.send_response(200 if up else 503); self.end_headers()
    def log_message(self, *args):
        pass

for address in ("127.0.0.2", "127.0.0.3"):
    threading.Thread(target=HTTPServer((address, 9200), Check).serve_forever, daemon=True).start()
threading.Thread(target=greet, daemon=True).start()
haproxy = subprocess.Popen(["haproxy", "-db", "-f", "/scenario/haproxy.cfg"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
time.sleep(1)
results = {}

def client(i):
    start = time.monotonic()
    c = socket.create_connection(("127.0.0.1", 3306), timeout=5)
    c.settimeout(60)
    try:
        got = c.recv(100).decode()
        results[i] = {"greeting": got, "after": round(time.monotonic() - start, 1)}
    except OSError as exc:
        results[i] = {"error": str(exc), "after": round(time.monotonic() - start, 1)}

threads = []
for i in range(5):
    t = threading.Thread(target=client, args=(i,)); t.start(); threads.append(t); time.sleep(1.5)
for t in threads:
    t.join()
haproxy.terminate()
print(json.dumps({"clients": results, "haproxy": haproxy.communicate(timeout=10)[0][-2000:]}))
"""


def test_a_connection_made_to_a_lost_database_server_reaches_the_backup(uc_home, tmp_path):
    need("podman")
    need_root()
    r = run_cli("image", "build", "service-haproxy", timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = run_cli("image", "show", "service-haproxy", "-f", "json")
    assert shown.returncode == 0, shown.stderr
    image = json.loads(shown.stdout)["properties"]["podman_image"]
    servers = ["127.0.0.2", "127.0.0.3"]
    database = {"name": "mysql", "port": 3306, "backend_port": 13306, "mode": "tcp", "check": "GET /",
                "check_port": 9200, "backup": True, "servers": servers}
    files, _pod, _ = service_support.render("haproxy", {
        "ServiceNodes": {"haproxy": servers, "mysql": servers}, "VirtualIP": servers[0],
        "ServiceData": {"haproxy": [database]}}, image)
    (tmp_path / "haproxy.cfg").write_text(files["haproxy.cfg"])
    (tmp_path / "scenario.py").write_text(SCENARIO)
    p = subprocess.run(["podman", "run", "--rm", "--network", "none", "--runtime", "runc",
                        "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096",
                        "-v", f"{tmp_path}:/scenario:ro", "--entrypoint", "python3", image, "/scenario/scenario.py"],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    clients = out["clients"]
    assert len(clients) == 5, out
    assert all(c.get("greeting") == "greeting from the backup\n" for c in clients.values()), out
    # The lost server was passed over: marked down by its checks, every client on the backup.
    assert "mysql-127.0.0.2 is DOWN" in out["haproxy"], out["haproxy"]
