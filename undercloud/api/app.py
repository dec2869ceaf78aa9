"""The HTTP API: one FastAPI app; each domain adds a router module listed in ROUTERS."""

from __future__ import annotations

import importlib
import logging
import os
import time

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse

from undercloud import __version__
from undercloud.api.context import Context
from undercloud.errors import Conflict, InvalidInput, NotFound, ServiceUnavailable, UndercloudError

log = logging.getLogger("undercloud.api")

# Modules with a `router` (fastapi.APIRouter); admin routers need the admin token.
ROUTERS: list[str] = [
    "undercloud.api.images",
    "undercloud.api.agent",
    "undercloud.api.agent_admin",
    "undercloud.api.nodes",
    "undercloud.api.deploy",
    "undercloud.api.servers",
    "undercloud.api.stacks",
    "undercloud.api.stack_signals",
]
# Callables "module:function" taking the Context, run once when the service starts
# (e.g. resume operations interrupted by a crash) and, if they return a callable, at stop.
STARTUP: list[str] = [
    "undercloud.api.stacks:startup",
    "undercloud.images.store:startup",
    "undercloud.provisioning.periodic:startup",
    "undercloud.api.deploy:startup",
    "undercloud.api.servers:startup",
]

STATUS = {NotFound: 404, Conflict: 409, InvalidInput: 400, ServiceUnavailable: 503}


def get_context(request: Request) -> Context:
    return request.app.state.ctx


def require_admin(request: Request, x_undercloud_token: str | None = Header(default=None)) -> None:
    if x_undercloud_token != request.app.state.ctx.admin_token:
        raise UndercloudError("missing or wrong admin token")


def create_app(ctx: Context) -> FastAPI:
    app = FastAPI(title="Undercloud", version=__version__)
    app.state.ctx = ctx
    app.state.started = time.time()

    @app.exception_handler(UndercloudError)
    async def user_error(_req: Request, exc: UndercloudError):
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 400)
        if exc.message == "missing or wrong admin token":
            status = 401
        return JSONResponse({"error": exc.message, "where": exc.where}, status_code=status)

    @app.get("/v1/health")
    def health():
        return {
            "status": "ok",
            "pid": os.getpid(),
            "version": __version__,
            "store": ctx.store.display_url,
            "home": str(ctx.home.path),
            "uptime": round(time.time() - app.state.started, 1),
        }

    for name in ROUTERS:
        mod = importlib.import_module(name)
        deps = [] if getattr(mod, "PUBLIC", False) else [Depends(require_admin)]
        app.include_router(mod.router, dependencies=deps)
    return app


def run_startup(ctx: Context) -> list:
    """Run the STARTUP hooks; returns the stop callables they handed back."""
    stops = []
    for spec in STARTUP:
        mod, fn = spec.split(":")
        stop = getattr(importlib.import_module(mod), fn)(ctx)
        if callable(stop):
            stops.append(stop)
    return stops
