"""Errors as RFC 9457 problem details (``application/problem+json``), naming the field.

Every error the API returns has ``type``, ``title``, ``status`` and ``detail``; validation
errors add ``errors: [{"field": "resources.workers.max", "problem": "..."}]``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from budgeteer.errors import BudgeteerError, SpecError, SpecErrors
from budgeteer.spec.errors import field_path
from budgeteer.store import AlreadyExists, IdempotencyConflict, NotFound

PROBLEM_JSON = "application/problem+json"
_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Content too large",
    415: "Unsupported media type",
    422: "Invalid request",
    503: "Service unavailable",
}


class Problem(Exception):
    """Raise to answer with a problem document."""

    def __init__(
        self, status: int, detail: str, errors: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []


def problem_response(
    status: int, detail: str, errors: list[dict[str, str]] | None = None, instance: str = ""
) -> JSONResponse:
    """A problem-details response."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    if errors:
        body["errors"] = errors
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def spec_problem(exc: SpecError | SpecErrors) -> Problem:
    """A 422 naming every field of a spec error."""
    errors = list(exc.errors) if isinstance(exc, SpecErrors) else [exc]
    listed = [{"field": e.field, "problem": e.problem} for e in errors]
    return Problem(422, "; ".join(f"{e['field']}: {e['problem']}" for e in listed), listed)


def _validation_field(loc: tuple[Any, ...]) -> str:
    parts = list(loc)
    if parts and parts[0] in {"body", "query", "path", "header"}:
        kind = parts.pop(0)
        if kind != "body" and parts:
            return f"{kind}.{parts[0]}"
        if kind == "body" and (not parts or isinstance(parts[0], int)):
            return "(body)"
    return field_path(parts)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for err in exc.errors():
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "missing":
            msg = "field required"
        errors.append(
            {
                "field": _validation_field(tuple(err["loc"])),
                "problem": msg.removeprefix("Value error, "),
            }
        )
    detail = "; ".join(f"{e['field']}: {e['problem']}" for e in errors) or "invalid request"
    return problem_response(422, detail, errors, request.url.path)


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(exc.status, exc.detail, exc.errors, request.url.path)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    errors = None
    if exc.status_code == 400:  # a body that is not JSON at all (invalid UTF-8 …): name it too
        errors = [
            {"field": "(body)", "problem": "not readable JSON (invalid UTF-8, or nested too deep)"}
        ]
    return problem_response(exc.status_code, str(exc.detail), errors, request.url.path)


async def _on_budgeteer(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BudgeteerError)
    if isinstance(exc, SpecError | SpecErrors):
        p = spec_problem(exc)
        return problem_response(422, p.detail, p.errors, request.url.path)
    if isinstance(exc, NotFound):
        return problem_response(404, str(exc), None, request.url.path)
    if isinstance(exc, AlreadyExists | IdempotencyConflict):
        return problem_response(409, str(exc), None, request.url.path)
    status = 503 if exc.transient else 400
    return problem_response(status, str(exc), None, request.url.path)


HANDLERS = {
    RequestValidationError: _on_validation,
    Problem: _on_problem,
    StarletteHTTPException: _on_http,
    BudgeteerError: _on_budgeteer,
}
