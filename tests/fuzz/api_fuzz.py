"""The API fuzzing run (schemathesis over the service's own OpenAPI), meant to run inside a
network namespace without routes: tests/fuzz/test_api_schemathesis.py starts it there.

    unshare --net python3 -m tests.fuzz.api_fuzz [--examples 40] [--budget 240] [--seed N]

The app runs in this process, served as the service serves it: uvicorn on the namespace's
loopback with the service's TLS (api/tls_port.py), every request over TLS verified by the
home's CA; only the fake BMC driver exists, and the namespace makes sure a fuzzed address
reaches nothing anyway. Prints one JSON line:
operations, examples tried, seconds, and the failures (a 5xx, or a 4xx that is not one
line of {error, where}).

Headers are fuzzed too: every example may carry token headers (admin, workers', server,
deploy, signal) holding odd bytes (non-ASCII, broken UTF-8, control characters). The
public routes (api/guard.PUBLIC_ROUTES) are called without the admin token; the admin
routes with it, and in one example of ten without it (or with an odd one): then they must
answer 401.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def no_route_anywhere() -> str | None:
    """Why this is not a namespace without routes (None when it is)."""
    routes = subprocess.run(["ip", "-o", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    outside = [r for r in routes.splitlines() if r.strip() and " lo " not in f" {r} " and "dev lo" not in r]
    if outside:
        return f"routes present: {outside[:3]}"
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("192.0.2.1", 80))  # TEST-NET-1: must be unreachable here
        return "192.0.2.1:80 was reachable"
    except OSError as exc:
        if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
            return f"connect to 192.0.2.1 failed unexpectedly: {exc}"
    finally:
        s.close()
    return None


RAW = "X-Fuzz-Raw-"


def raw_headers(app):
    """The app, with each header `X-Fuzz-Raw-NAME: HEX` handed to it as `NAME` holding those
    bytes: HTTP clients send only ASCII text, a hostile one any bytes."""
    prefix = RAW.lower().encode()

    async def wrapped(scope, receive, send):
        if scope["type"] == "http":
            scope = {**scope, "headers": [(k[len(prefix):], bytes.fromhex(v.decode())) if k.startswith(prefix)
                                          else (k, v) for k, v in scope["headers"]]}
        await app(scope, receive, send)

    return wrapped


def serve_over_tls(ctx, app) -> tuple[str, str]:
    """`app` served on this namespace's loopback as the service serves it (uvicorn, the
    service's certificate: api/tls_port.py); (its https URL, the CA file clients verify with)."""
    import threading

    import uvicorn

    from undercloud.api.tls_port import http_protocol

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                                           http=http_protocol(ctx.tls)))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the fuzzed service did not start")
        time.sleep(0.05)
    return f"https://127.0.0.1:{port}", str(ctx.home.ca_file)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=25, help="examples per operation and generation mode")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds; operations not started by then are skipped")
    ap.add_argument("--seed", type=int, default=None, help="repeat a run (each run prints its seed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    problem = no_route_anywhere()
    if problem:
        print(json.dumps({"error": f"not in a namespace without routes: {problem}"}))
        sys.exit(2)

    home = Path(tempfile.mkdtemp(prefix="uc-fuzz-")) / "uc"
    os.environ.update(UNDERCLOUD_HOME=str(home), UNDERCLOUD_POWER_SYNC_INTERVAL="0",
                      UNDERCLOUD_MAX_IMAGE_BYTES=str(1 << 20), UNDERCLOUD_AGENT_URL="http://127.0.0.1:9")
    warnings.simplefilter("ignore")
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    from undercloud.api.app import create_app
    from undercloud.api.context import Context
    from undercloud.config import Home
    from undercloud.provisioning import drivers

    for name in list(drivers.DRIVERS):  # the fake driver only: no BMC protocol is spoken
        if name != "fake":
            del drivers.DRIVERS[name]
    ctx = Context(Home(home))
    app = create_app(ctx)
    token = ctx.admin_token
    from undercloud.api.guard import DRAIN_BYTES, PUBLIC_ROUTES

    url, ca = serve_over_tls(ctx, raw_headers(app))
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers={"X-Undercloud-Token": token}, verify=ca)
    names = ["X-Undercloud-Token", "X-Undercloud-Worker-Token", "X-Server-Token", "X-Deploy-Token", "X-Signal-Token"]
    # bytes a client may put in a header value (no CR, LF or NUL, which end or break it)
    odd_value = st.binary(max_size=48).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\x00", b""))
    odd_headers = st.dictionaries(st.sampled_from(names), odd_value, max_size=3)

    def public(method: str, path: str) -> bool:
        concrete = re.sub(r"\{[^}]+\}", "p1", path)
        return any(method.upper() in m and rx.fullmatch(concrete) for m, rx in PUBLIC_ROUTES)

    t0 = time.monotonic()
    tried, failures, skipped, ops = 0, [], [], 0
    def fuzz(op, label: str) -> None:
        strategy = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))
        is_public = public(op.method, op.path)

        @hypothesis_seed(seed)
        @settings(max_examples=2 * args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
        @given(case=strategy, odd=odd_headers, anonymous=st.integers(0, 9))
        def run(case, odd, anonymous):
            nonlocal tried
            tried += 1
            headers = {k: v for k, v in (case.headers or {}).items() if k.lower() not in {n.lower() for n in odd}}
            headers.update({RAW + name: value.hex() for name, value in odd.items()})
            refused = not is_public and anonymous == 0  # an admin route without a good token
            if refused:
                headers.pop("X-Undercloud-Worker-Token", None)
                if headers.get("X-Undercloud-Token") == token:
                    del headers["X-Undercloud-Token"]
            elif not is_public:  # the admin's token alone
                for name in ("X-Undercloud-Token", "X-Undercloud-Worker-Token"):
                    headers.pop(name, None)
                    headers.pop(RAW + name, None)
                headers["X-Undercloud-Token"] = token
            try:
                r = case.call(headers=headers, timeout=30, verify=ca)
            except Exception as exc:  # noqa: BLE001 - the client refusing to send it is not our failure
                if type(exc).__name__ in ("InvalidHeader", "InvalidURL", "LocalProtocolError", "UnicodeEncodeError",
                                          "InvalidRegularExpression", "SerializationNotPossible"):
                    return
                if refused and type(exc).__name__ in ("SSLError", "ConnectionError") \
                        and len(json.dumps(case.body, default=str)) > DRAIN_BYTES:
                    return  # the guard's rule: a refused body this large is not read, the connection closes
                failures.append({"operation": label, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                return
            if r.status_code >= 500:
                failures.append({"operation": label, "status": r.status_code, "body": r.text[:300],
                                 "request": case.as_curl_command()[:500], "headers": repr(headers)[:300]})
            elif refused and r.status_code != 401:
                failures.append({"operation": label, "status": r.status_code, "body": r.text[:300],
                                 "error": "an admin route answered without the admin token"})
            elif 400 <= r.status_code < 500 and r.status_code != 405 and op.method.upper() != "HEAD":
                try:
                    body = r.json()
                    one_line = isinstance(body, dict) and isinstance(body.get("error"), str) and "where" in body
                    if one_line and "\n" in body["error"]:  # an instackenv lists its problems, one per line
                        one_line = label.startswith("POST /v1/nodes/import")
                except ValueError:
                    one_line = False
                if not one_line:
                    failures.append({"operation": label, "status": r.status_code, "body": r.text[:300]})

        run()

    for result in schema.get_all_operations():
        op = result.ok()
        label = f"{op.method.upper()} {op.path}"
        if time.monotonic() - t0 > args.budget:
            skipped.append(label)
            continue
        ops += 1
        fuzz(op, label)
    import requests

    t = time.monotonic()
    r = requests.get(f"{url}/v1/health", verify=ca, timeout=10)
    health = {"status": r.status_code, "seconds": round(time.monotonic() - t, 3), "keys": sorted(r.json())}
    print(json.dumps({"operations": ops, "examples": tried, "seed": seed, "seconds": round(time.monotonic() - t0, 1),
                      "skipped": skipped, "failures": failures[:50], "failure_count": len(failures),
                      "health": health}), flush=True)
    shutil.rmtree(home.parent, ignore_errors=True)
    os._exit(0)  # node workers may sleep in fake BMC delays: do not wait for them


if __name__ == "__main__":
    main()
