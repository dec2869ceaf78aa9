"""The API's outer guard (ASGI middleware): every request is bounded and every failure is
one line.

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

from undercloud.api.limits import LIMITS, body_limit, exceeded
from undercloud.errors import UndercloudError, internal_error

log = logging.getLogger("undercloud.api")

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
LENIENT = {"signal_body_bytes"}  # what agents send back (command output) may hold NUL characters


class PayloadTooLarge(UndercloudError):
    pass


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
        try:
            if "\x00" in path or b"%00" in scope.get("query_string", b"") or b"\x00" in scope.get("query_string", b""):
                return await reply(send_, 400, "a NUL character in the request's path or query", "request")
            name, limit = body_limit(method, path)
            length = None
            for k, v in scope["headers"]:
                if k == b"content-length":
                    if not v.isdigit():
                        return await reply(send_, 400, "Content-Length is not a number", "request")
                    length = int(v)
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
                return await reply(send_, 413, exc.message, exc.where)
            err = internal_error(exc, log, f"{method} {path}")
            if not started:
                await reply(send_, 500, err.message)


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
