"""The API's outer guard (ASGI middleware): who may call what, every request bounded, every
failure one line.

- The admin token over plain HTTP is refused (426) before anything else: the CLI speaks TLS
  (api/tls_port.py), and a token sent in the clear is one sent across every network the
  port is on. So is a server token made for an agent given the https URL and the CA
  (tokens.TLS_SERVER), and the workers' own token to a worker whose URL (the one the other
  workers are given) is https. Plain HTTP stays for the public routes (boot files, agents
  configured before TLS) and for a worker given an http URL (UNDERCLOUD_AGENT_URL, or one of
  an older version).
- Audience, from the request line and headers alone, before any body byte is read: a
  request is for a public route (PUBLIC_ROUTES: agent, deploy, stack-signal and
  image-download routes, `/v1/health`; each checks its caller's own credential) or an
  admin one (everything else, the schema and docs included, and paths no route has). On
  an address served for guests (api/listeners.py) only public routes answer (404
  otherwise, whatever the token); elsewhere an admin route without the admin token (or
  the workers' own) is refused 401 at once, and the connection closed rather than a body
  of more than DRAIN_BYTES read (a smaller one is read and dropped first, so that the
  close sends no reset that could overtake the answer).
- Body size per route (api/limits.py): a Content-Length over the limit is refused before
  anything is read; a body sent without one is counted as it streams and cut at the limit
  (413). Image content streams through; other bodies are small enough to read whole.
- JSON bodies are checked before any route sees them: well-formed UTF-8 JSON, nested at
  most `json_depth` levels, no lone surrogate (it cannot be stored or shown as UTF-8) and,
  on admin routes, no NUL character (PostgreSQL cannot store it). The path and the query
  string carry no NUL either.
- Anything a route raises that is not a user error becomes 500 "internal error <id>",
  logged under that id without values (errors.internal_error); nothing reaches uvicorn's
  traceback logging.
"""

from __future__ import annotations

import json
import logging
import re
from urllib.parse import parse_qs

from undercloud import tokens
from undercloud.api.limits import LIMITS, body_limit, exceeded
from undercloud.errors import UndercloudError, internal_error

log = logging.getLogger("undercloud.api")

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
GET = frozenset({"GET", "HEAD"})
ANY = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# What machines on lab networks call (all a guest address serves), and nothing else: the
# routes without the admin dependency. tests/unit/test_api_audience.py checks it against
# the routes themselves.
PUBLIC_ROUTES: tuple[tuple[frozenset, re.Pattern], ...] = tuple((frozenset(m), re.compile(p, re.DOTALL)) for m, p in (
    (GET, r"/v1/health"),                                                 # liveness: status and version only
    (GET, r"/v1/agent/servers/[^/]+/metadata"),                           # agents (X-Server-Token)
    ({"POST"}, r"/v1/agent/servers/[^/]+/deployments/[^/]+/signal"),     # agents
    ({"PUT"}, r"/v1/agent/servers/[^/]+/health"),                         # agents' watchdog
    # the deploy router, all public: the ramdisk's call-back (X-Deploy-Token), iPXE's boot
    # script, kernel, initramfs and request; the router answers what is not a route there
    (ANY, r"/v1/deploy/.*"),
    ({"POST"}, r"/v1/stacks/[^/]+/resources/[^/]+/signal"),              # wait condition handles (X-Signal-Token)
    (GET, r"/v1/images/[^/]+/file"),                                      # images by id: ramdisk, kube hook, workers
))
ADMIN_HEADER = b"x-undercloud-token"  # the operator's token: refused on plain HTTP (api/tls_port.py)
WORKER_HEADER = b"x-undercloud-worker-token"  # the workers' own: plain HTTP only to a worker whose URL is http
SERVER_HEADER = b"x-server-token"  # a server's agent's token: refused on plain HTTP when made for https
LENIENT = {"signal_body_bytes"}
DRAIN_BYTES = 64 * 1024  # a refused request's body read and dropped up to this much (guard._drain)  # what agents send back (command output) may hold NUL characters


class PayloadTooLarge(UndercloudError):
    status = 413


async def reply(send, status: int, message: str, where: str | None = None, headers=()) -> None:
    body = json.dumps({"error": message, "where": where}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def check_json(raw: bytes, strict: bool) -> tuple[str, str | None] | None:
    """(problem, where) for a body that is not acceptable JSON, else None."""
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError:
        return "the body is not UTF-8", "body"
    except json.JSONDecodeError as exc:
        return f"the body is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", "body"
    except RecursionError:
        return f"the body nests deeper than {LIMITS.json_depth} levels", "body"
    except ValueError:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        return "the body is not JSON this service reads: a number with too many digits", "body"
    todo: list[tuple[object, tuple, int]] = [(doc, (), 1)]
    while todo:
        value, path, depth = todo.pop()
        if isinstance(value, str):
            bad = _bad_text(value, strict)
            if bad:
                return bad, _where(path)
        elif isinstance(value, dict | list):
            if depth > LIMITS.json_depth:
                return exceeded("json_depth", "the body's nesting"), _where(path)
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(k, str):
                    bad = _bad_text(k, strict)
                    if bad:
                        return f"a key with {bad}", _where(path)
                todo.append((v, path + (k,), depth + 1))
    return None


def _bad_text(s: str, strict: bool) -> str | None:
    if strict and "\x00" in s:
        return "a NUL character"
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (not valid Unicode)"
    return None


def _where(path: tuple) -> str:
    return "body" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path[:8])


class Guard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        method, path = scope["method"], scope["path"]

        async def refuse(status: int, message: str, where: str | None) -> None:
            """Answer before the body is read: a body of more than DRAIN_BYTES is not read at
            all, and the connection closes after the answer."""
            if not _has_body(scope):
                return await reply(send_, status, message, where)
            await _drain(scope, receive)
            await reply(send_, status, message, where, headers=[(b"connection", b"close")])

        try:
            refused = audience(scope)
            if refused:
                return await refuse(*refused)
            if "\x00" in path or b"%00" in scope.get("query_string", b"") or b"\x00" in scope.get("query_string", b""):
                return await refuse(400, "a NUL character in the request's path or query", "request")
            name, limit = body_limit(method, path)
            length = None
            for k, v in scope["headers"]:
                if k == b"content-length":
                    if not v.isdigit():
                        return await reply(send_, 400, "Content-Length is not a number", "request")
                    length = int(v) if len(v) < 20 else 1 << 64  # more digits than int() takes: over any limit
            if length is not None and length > limit:
                return await reply(send_, 413, exceeded(name, "the request body", length), "request")
            if method in WRITE_METHODS and name != "image_bytes":
                raw = await _read(receive, limit)
                if raw is None:
                    return await reply(send_, 413, exceeded(name, "the request body"), "request")
                if raw.strip():
                    problem = check_json(raw, strict=name not in LENIENT)
                    if problem:
                        return await reply(send_, 400, *problem)
                receive = _replay(raw, receive)
            else:
                receive = _counting(receive, name, limit)
            await self.app(scope, receive, send_)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback
            if isinstance(exc, PayloadTooLarge) and not started:
                return await reply(send_, exc.status, exc.message, exc.where)
            err = internal_error(exc, log, f"{method} {path}")
            if not started:
                await reply(send_, err.status, err.message)


def admin(ctx, headers) -> bool:
    """The request carries the admin token, or the workers' own (one forwarding an admin's
    request); compared as the bytes sent."""
    given = dict(headers)
    return (tokens.same(given.get(b"x-undercloud-token"), ctx.admin_token)
            or tokens.same(given.get(WORKER_HEADER), ctx.worker_token))


def audience(scope) -> tuple[int, str, str | None] | None:
    """(status, message, where) refusing a request to a route that is not for its caller,
    else None."""
    method, path = scope["method"], scope["path"]
    if scope.get("scheme") == "http" and any(k == ADMIN_HEADER for k, _v in scope["headers"]):
        return (426, "the admin token is taken over https only (the URL `undercloud service status` gives, "
                     "verified with the CA it names)", "scheme")
    if scope.get("scheme") == "http" and _tls_server_token(scope):
        return (426, "this server's agent was given the undercloud's https URL and CA: its token is taken over "
                     "https only", "scheme")
    if scope.get("scheme") == "http" and any(k == WORKER_HEADER for k, _v in scope["headers"]) \
            and scope["app"].state.ctx.agent_url.startswith("https://"):
        # the other workers reach this one at the URL it gives them (workers' table): https
        return (426, "this worker's URL is https: the workers' token is taken over https only", "scheme")
    if any(method in methods and pattern.fullmatch(path) for methods, pattern in PUBLIC_ROUTES):
        return None
    ctx = scope["app"].state.ctx
    if ctx.listeners.for_guests(scope.get("server")):
        return (404, f"{scope['method']} {scope['path'][:100]!r} is not served on this address (machines on lab "
                     "networks reach the agent, deploy, signal and image download routes only)", "listener")
    if not admin(ctx, scope["headers"]):
        return 401, "missing or wrong admin token", None
    return None


def _tls_server_token(scope) -> bool:
    """The request carries a server token made for an agent that speaks https (header or
    `?token=`, os-collect-config's way)."""
    prefix = tokens.TLS_SERVER.encode()
    if any(k == SERVER_HEADER and v.startswith(prefix) for k, v in scope["headers"]):
        return True
    query = scope.get("query_string") or b""
    return b"token=" + prefix in query and any(
        v.startswith(tokens.TLS_SERVER) for v in parse_qs(query.decode("latin-1")).get("token", []))


async def _drain(scope, receive) -> None:
    """Read and drop a refused request's body when it is small (at most DRAIN_BYTES, as
    declared or as it streams), so that closing the connection after the answer sends no
    reset: a reset can overtake the answer and leave the client with a broken connection
    instead of its 401 (a lingering close, as HTTP servers do). A larger body stays unread."""
    declared = dict(scope["headers"]).get(b"content-length", b"").strip()
    if declared and (not declared.isdigit() or len(declared) > 9 or int(declared) > DRAIN_BYTES):
        return
    await _read(receive, DRAIN_BYTES)


def _has_body(scope) -> bool:
    return any((k == b"content-length" and v.strip() not in (b"", b"0")) or k == b"transfer-encoding"
               for k, v in scope["headers"])


async def _read(receive, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            return None
        chunks.append(body)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(raw: bytes, receive):
    done = False

    async def receive_():
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive()  # a disconnect, for streaming responses that wait for it

    return receive_


def _counting(receive, name: str, limit: int):
    size = 0

    async def receive_():
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise PayloadTooLarge(exceeded(name, "the request body"), "request")
        return message

    return receive_
