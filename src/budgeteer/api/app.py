"""The FastAPI application: ``/v1`` (jobs, pipelines, budgets, offerings, tokens), ``/metrics``,
``/healthz``, the dashboard at ``/`` and the OpenAPI spec at ``/openapi.json``.

Request bodies larger than ``max_body_bytes`` are refused with 413 before they are read whole;
every error is a problem document (:mod:`budgeteer.api.problems`)."""

from __future__ import annotations

import hmac
import json
import logging
from typing import Annotated, Any

from fastapi import FastAPI, Header, Response
from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from budgeteer.api import admin, budgets, dashboard, jobs, pipelines, signals
from budgeteer.api.auth import authenticate
from budgeteer.api.context import ApiContext
from budgeteer.api.metrics import registry
from budgeteer.api.problems import HANDLERS, Problem, problem_response

log = logging.getLogger("budgeteer.api")


class _TooLarge(Exception):
    """Raised inside the app when the streamed body passes the limit (caught by BodyLimit)."""


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes (413), by header or while streaming; log
    each request's method, path and status (a plain ASGI wrapper: cheaper than Starlette's
    ``BaseHTTPMiddleware``)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        status = 0

        path = str(scope.get("path", ""))

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), *_security_headers(path)]
            await send(message)

        try:
            await self.app(scope, limited, noted)
        except _TooLarge:
            await self._refuse(scope, receive, send)
            status = 413
        log.info(
            "%s %s %s",
            scope.get("method"),
            scope.get("path"),
            status,
            extra={"path": scope.get("path"), "status": status},
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem_response(
            413, f"request body over {self.limit} bytes", None, str(scope.get("path", ""))
        )
        await response(scope, receive, send)


#: Sent with every response: no MIME sniffing, no framing, no referrer, and (except on the
#: interactive API docs, which load their scripts from a CDN) nothing loaded from elsewhere —
#: the dashboard is one page with its own inline style and SVG.
_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)
_CSP = (
    b"content-security-policy",
    b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
)


def _security_headers(path: str) -> tuple[tuple[bytes, bytes], ...]:
    if path.startswith(("/docs", "/redoc")):
        return _HEADERS
    return (*_HEADERS, _CSP)


def create_app(ctx: ApiContext) -> FastAPI:
    """The API over ``ctx``; ``app.state.cycle_seconds`` is the histogram the loop observes."""
    app = FastAPI(
        title="budgeteer",
        version="0.1.0",
        description="Compute budget scheduler for ML retraining.",
        exception_handlers=HANDLERS,  # type: ignore[arg-type]
    )
    app.state.ctx = ctx
    reg, cycle = registry(ctx)
    app.state.cycle_seconds = cycle
    app.include_router(jobs.router)
    app.include_router(budgets.router)
    app.include_router(admin.router)
    app.include_router(dashboard.router)
    app.include_router(signals.router)
    app.include_router(pipelines.router)

    @app.get("/metrics", include_in_schema=False)
    def metrics(
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        """Every team's spend and budgets: the admin token or the metrics token, unless the
        operator opened it (``api.metrics_public``)."""
        if not ctx.metrics_public and not _may_scrape(ctx, authorization):
            raise Problem(401, "/metrics needs the admin token or the metrics token")
        return Response(generate_latest(reg), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, Any]:
        """Liveness, and whether this replica runs the scheduler."""
        return {"ok": True, "leader": ctx.is_leader()}

    @app.get("/readyz", tags=["health"])
    def readyz() -> Response:
        """Readiness: the store answers and, on the replica that leads, the last successful
        scheduler cycle is recent (503 with the reason otherwise)."""
        try:
            ctx.store.change_token()
        except Exception as exc:  # any failure to reach the store means not ready
            return _ready(False, f"store unreachable: {type(exc).__name__}: {exc}")
        ok, why = ctx.loop_ready()
        return _ready(ok, why)

    app.add_middleware(BodyLimit, limit=ctx.max_body_bytes)
    return app


def _may_scrape(ctx: ApiContext, authorization: str | None) -> bool:
    """Whether the bearer is the metrics token or an admin's."""
    secret = (authorization or "").removeprefix("Bearer ").strip()
    token = ctx.metrics_token
    if secret and token and hmac.compare_digest(secret.encode(), token.encode()):
        return True
    who = authenticate(
        authorization, lookup=ctx.token, admin_token=ctx.admin_token, secret_key=ctx.secret_key
    )
    return who is not None and who.admin


def _ready(ok: bool, reason: str) -> Response:
    body = {"ready": ok, "reason": reason}
    return Response(json.dumps(body), status_code=200 if ok else 503, media_type="application/json")


def cycle_histogram(app: FastAPI) -> Histogram:
    """The scheduler-cycle histogram of ``app``."""
    hist: Histogram = app.state.cycle_seconds
    return hist


def dumps(obj: Any) -> str:
    """Compact JSON (for logs)."""
    return json.dumps(obj, separators=(",", ":"), default=str)
