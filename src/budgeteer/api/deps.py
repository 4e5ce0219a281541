"""Request dependencies: the context and the authenticated caller.

They are ``async`` on purpose: FastAPI runs a plain ``def`` dependency in the thread pool, a hop
per dependency per request; these are cheap (the token lookup is cached, see
:meth:`ApiContext.token`), so they run on the event loop."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from budgeteer.api.auth import Principal, authenticate
from budgeteer.api.context import ApiContext
from budgeteer.api.problems import Problem


async def context(request: Request) -> ApiContext:
    """The API context of this app."""
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(context)]


async def caller(
    ctx: Ctx, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Principal:
    """The authenticated caller (401 otherwise). Job tokens only reach the progress endpoint."""
    who = authenticate(
        authorization, lookup=ctx.token, admin_token=ctx.admin_token, secret_key=ctx.secret_key
    )
    if who is None:
        raise Problem(401, "missing or invalid bearer token")
    return who


async def person(who: Annotated[Principal, Depends(caller)]) -> Principal:
    """A team or admin caller (job tokens may only report progress)."""
    if who.job_id is not None:
        raise Problem(403, "a job token may only report its job's progress")
    return who


async def admin(who: Annotated[Principal, Depends(person)]) -> Principal:
    """An admin caller (403 otherwise)."""
    if not who.admin:
        raise Problem(403, "only an admin token may do this")
    return who


Caller = Annotated[Principal, Depends(caller)]
Person = Annotated[Principal, Depends(person)]
Admin = Annotated[Principal, Depends(admin)]
