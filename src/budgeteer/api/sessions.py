"""Dashboard logins: server-side sessions behind a random cookie.

A browser cannot send a bearer header, so the login form (``POST /login``) checks the token
once and opens a session: the browser gets a random id in an HttpOnly, SameSite=Strict cookie
(Secure when served over TLS); the store keeps only the id's hash, whose credential it stands
for and until when — so every ``--workers`` process and every replica on the same store knows
it, a logout ends it everywhere, and the token itself never sits in a cookie or a URL.

The credential is re-checked on every request: a session of a revoked team token, or of an
admin token the service no longer has, stops working at once. Expiry is wall-clock time (an
accelerated sandbox clock does not shorten a login).
"""

from __future__ import annotations

import hmac
import secrets
from datetime import timedelta

from budgeteer.api.auth import Principal, hash_token
from budgeteer.api.context import ApiContext
from budgeteer.store import WebSession

COOKIE = "budgeteer_session"


def open_session(ctx: ApiContext, who: Principal, secret: str) -> str:
    """Start a session for ``who`` (who logged in with ``secret``); returns the cookie value."""
    kind = "admin" if who.key == "admin" else "token"
    now = ctx.wall_clock.now()
    session_id = secrets.token_urlsafe(32)
    ctx.store.add_session(
        hash_token(session_id),
        WebSession(f"{kind}:{hash_token(secret)}", now, now + session_length(ctx)),
    )
    return session_id


def session_length(ctx: ApiContext) -> timedelta:
    """How long a login lasts."""
    return timedelta(hours=ctx.session_hours)


def session_principal(ctx: ApiContext, session_id: str | None) -> Principal | None:
    """The caller a session cookie stands for, or ``None`` (unknown, expired or revoked)."""
    if not session_id or len(session_id) > 128:
        return None
    session = ctx.store.session(hash_token(session_id))
    if session is None or session.expires_at <= ctx.wall_clock.now():
        return None
    kind, _, credential = session.credential.partition(":")
    if kind == "admin":
        current = hash_token(ctx.admin_token) if ctx.admin_token else ""
        if current and hmac.compare_digest(credential, current):
            return Principal("admin", admin=True)
        return None
    token = ctx.token(credential)
    if token is None or token.revoked_at is not None:
        return None
    return Principal(f"token:{token.id}", admin=token.admin, teams=frozenset(token.teams))


def close_session(ctx: ApiContext, session_id: str | None) -> None:
    """End a session (logout)."""
    if session_id and len(session_id) <= 128:
        ctx.store.end_session(hash_token(session_id))
