"""The HTTP API: one FastAPI app; each domain adds a router module listed in ROUTERS."""

from __future__ import annotations

import importlib
import logging
import os
import time
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException

from undercloud import __version__
from undercloud.api.context import Context
from undercloud.api.guard import Guard, admin
from undercloud.daemon import health_proof
from undercloud.errors import Unauthorized, UndercloudError, internal_error

log = logging.getLogger("undercloud.api")

# Modules with a `router` (fastapi.APIRouter); admin routers need the admin token.
ROUTERS: list[str] = [
    "undercloud.api.images",
    "undercloud.api.agent",
    "undercloud.api.agent_admin",
    "undercloud.api.nodes",
    "undercloud.api.clouds",
    "undercloud.api.overcloud",
    "undercloud.api.overcloud_status",
    "undercloud.api.ramdisk_callback",
    "undercloud.api.servers",
    "undercloud.api.stacks",
    "undercloud.api.stack_signals",
    "undercloud.api.workers",
    "undercloud.api.workflows",
]
# Callables "module:function" taking the Context, run once when the service starts
# (e.g. resume operations interrupted by a crash) and, if they return a callable, at stop.
STARTUP: list[str] = [
    "undercloud.api.stacks:startup",
    "undercloud.images.store:startup",
    "undercloud.provisioning.periodic:startup",
    "undercloud.api.ramdisk_callback:startup",
    "undercloud.api.servers:startup",
    "undercloud.api.workflows:startup",
    "undercloud.api.tls_port:startup",
]

def get_context(request: Request) -> Context:
    return request.app.state.ctx


def require_admin(request: Request, x_undercloud_token: str | None = Header(default=None)) -> None:
    """The admin routes' dependency. The guard refused a request without the token before
    its body was read (guard.PUBLIC_ROUTES are the others); this keeps the rule on the
    route itself and in the schema."""
    if not admin(request.app.state.ctx, request.scope["headers"]):
        raise Unauthorized("missing or wrong admin token")


def _validation_line(exc: RequestValidationError) -> tuple[str, str]:
    """The first problem of a request pydantic refused, as (message, where); never the value."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ())]
    if len(loc) > 1 and loc[0] == "body":
        loc = loc[1:]
    where = ".".join(loc) or "request"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.get('msg', 'invalid request')}{more}", where


def _openapi_400(app: FastAPI):
    """OpenAPI as the API answers: refused input is 400 {error, where}, never FastAPI's 422."""
    make = app.openapi

    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        doc = make()
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        schemas["Error"] = {"type": "object", "required": ["error"], "properties": {
            "error": {"type": "string"}, "where": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}
        for item in doc.get("paths", {}).values():
            for op in item.values():
                responses = op.get("responses") if isinstance(op, dict) else None
                if responses is not None and responses.pop("422", None) is not None:
                    responses["400"] = {"description": "Refused input (one line)", "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        app.openapi_schema = doc
        return doc

    return openapi


def api_threads(store) -> int:
    """Threads that run (synchronous) requests: half the store's connections, so requests
    beyond them wait their turn here instead of timing out at the connection pool."""
    return max(8, min(40, store.capacity // 2))


def create_app(ctx: Context) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app):
        anyio.to_thread.current_default_thread_limiter().total_tokens = api_threads(ctx.store)
        yield

    app = FastAPI(title="Undercloud", version=__version__, lifespan=lifespan)
    app.state.ctx = ctx
    app.state.started = time.time()

    app.add_middleware(Guard)
    app.openapi = _openapi_400(app)

    @app.exception_handler(UndercloudError)
    async def user_error(_req: Request, exc: UndercloudError):
        # the status is the error class's own (errors.py): a subclass inherits its base's
        return JSONResponse({"error": exc.message, "where": exc.where}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_req: Request, exc: RequestValidationError):
        message, where = _validation_line(exc)
        return JSONResponse({"error": message, "where": where}, status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(_req: Request, exc: HTTPException):
        return JSONResponse({"error": str(exc.detail), "where": None}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(sa_exc.IntegrityError)
    async def integrity(req: Request, exc: sa_exc.IntegrityError):
        # two requests wrote the same thing at once (the routes check first; the store decides)
        return JSONResponse({"error": "conflicts with a record written at the same time; nothing was changed",
                             "where": None}, status_code=409)

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def busy(req: Request, exc: Exception):
        if isinstance(exc, sa_exc.OperationalError) and "locked" not in str(exc.orig):
            return JSONResponse({"error": internal_error(exc, log, f"{req.method} {req.url.path}").message,
                                 "where": None}, status_code=500)
        return JSONResponse({"error": "the store is busy; try again", "where": None}, status_code=503,
                            headers={"Retry-After": "5"})

    @app.get("/v1/health")
    async def health(request: Request, x_undercloud_challenge: str | None = Header(default=None, max_length=64)):
        """Public, minimal: status and version, and to a challenge the proof that this service
        holds its home's admin token (daemon.health asks before it sends the token). With
        the token, not on a guest address: which process answers for which home and store.
        On the event loop: it answers even when every request thread is busy."""
        if not admin(ctx, request.scope["headers"]) or ctx.listeners.for_guests(request.scope.get("server")):
            proof = {"proof": health_proof(ctx.admin_token, x_undercloud_challenge)} if x_undercloud_challenge else {}
            return {"status": "ok", "version": __version__, **proof}
        return {
            "status": "ok",
            "pid": os.getpid(),
            "version": __version__,
            "store": ctx.store.display_url,
            "home": str(ctx.home.path),
            "uptime": round(time.time() - app.state.started, 1),
            "certificate_expires": ctx.tls.expires,
        }

    for name in ROUTERS:
        mod = importlib.import_module(name)
        deps = [] if getattr(mod, "PUBLIC", False) else [Depends(require_admin)]
        app.include_router(mod.router, dependencies=deps)
    return app


def run_startup(ctx: Context) -> list:
    """Join the store's workers, run the STARTUP hooks; returns the stop callables they handed
    back, in order, and last the worker's leaving (its operations have stopped writing)."""
    from undercloud.api.workers import startup as join_workers

    leave = join_workers(ctx)  # before any hook resumes work: the others see this worker alive
    stops = []
    for spec in STARTUP:
        mod, fn = spec.split(":")
        stop = getattr(importlib.import_module(mod), fn)(ctx)
        if callable(stop):
            stops.append(stop)
    return [*stops, leave]
