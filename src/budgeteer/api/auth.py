"""Who is calling: the admin token, a team token (stored only as a hash), or a job token.

- The **admin** token comes from ``BUDGETEER_ADMIN_TOKEN`` or the config; it manages budgets and
  tokens and sees everything.
- **Team tokens** are created by an admin (``POST /v1/tokens``), shown once, stored as their
  SHA-256 (the secrets are 256-bit random, so a fast hash is enough — no password stretching
  needed), scoped to teams, revocable. A team token sees and acts on its teams' jobs and budgets
  only; anything else is ``404`` (it does not learn that the id exists) or ``403``.
- **Job tokens** (``job.<job id>.<hmac>``) are handed to a running job in its environment
  (``BUDGETEER_JOB_TOKEN``) and may only report that job's progress. They are an HMAC of the job
  id under the service's secret key, so nothing is stored and they cannot be forged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from budgeteer.store import ApiToken

TOKEN_PREFIX = "bgt_"


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller: an admin, a team token's teams, or one job."""

    key: str  # stable id of the credential (namespaces idempotency keys)
    admin: bool = False
    teams: frozenset[str] = frozenset()
    job_id: str | None = None

    def sees_team(self, team: str) -> bool:
        """True when this caller may see and act for ``team``."""
        return self.admin or team in self.teams


def hash_token(secret: str) -> str:
    """The stored form of a token secret."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh team-token secret."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def job_token(secret_key: bytes, job_id: str) -> str:
    """The token a job's process uses to report its progress."""
    mac = hmac.new(secret_key, job_id.encode(), hashlib.sha256).hexdigest()
    return f"job.{job_id}.{mac}"


def authenticate(
    header: str | None,
    *,
    lookup: Callable[[str], ApiToken | None],
    admin_token: str,
    secret_key: bytes,
) -> Principal | None:
    """The principal for an ``Authorization: Bearer …`` header, or ``None`` (unauthorized);
    ``lookup`` finds a team token's record by the hash of its secret."""
    if not header or not header.startswith("Bearer "):
        return None
    secret = header.removeprefix("Bearer ").strip()
    if not secret:
        return None
    if admin_token and hmac.compare_digest(secret.encode(), admin_token.encode()):
        return Principal("admin", admin=True)
    if secret.startswith("job."):
        job_id = secret[4:].rpartition(".")[0]
        if job_id and hmac.compare_digest(secret, job_token(secret_key, job_id)):
            return Principal(f"job:{job_id}", job_id=job_id)
        return None
    token = lookup(hash_token(secret))
    if token is None or token.revoked_at is not None:
        return None
    return Principal(f"token:{token.id}", admin=token.admin, teams=frozenset(token.teams))
