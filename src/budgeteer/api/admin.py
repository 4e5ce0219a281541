"""``/v1/tokens`` (admin) and ``/v1/offerings`` (anyone authenticated)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from pydantic import BaseModel, ConfigDict, Field

from budgeteer.api.auth import hash_token, new_secret
from budgeteer.api.deps import Admin, Ctx, Person
from budgeteer.core.pools import PoolView
from budgeteer.core.spot.estimate import MarketHistory, mean_hours
from budgeteer.domain.offering import Market, Offering
from budgeteer.store import ApiToken, OfferingBackoff, PricePoint, Store

router = APIRouter(prefix="/v1", tags=["admin"])
Team = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]


class TokenRequest(BaseModel):
    """A team token to create: a name and the teams it may act for."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=128)]
    teams: Annotated[list[Team], Field(min_length=1, max_length=64)]


def _token(t: ApiToken) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "teams": list(t.teams),
        "admin": t.admin,
        "created_at": t.created_at.isoformat(),
        "revoked_at": t.revoked_at.isoformat() if t.revoked_at else None,
    }


def make_token(store: Store, request: TokenRequest, now: datetime) -> tuple[ApiToken, str]:
    """Create and store a team token; returns its record and its secret (never stored)."""
    secret = new_secret()
    token = ApiToken(
        f"tok_{secrets.token_hex(6)}", request.name, tuple(sorted(set(request.teams))), False, now
    )
    store.add_token(token, hash_token(secret))
    return token, secret


@router.post("/tokens", status_code=201)
def create_token(request: Annotated[TokenRequest, Body()], ctx: Ctx, who: Admin) -> dict[str, Any]:
    """Create a team token; the secret is in this answer only (it is stored as a hash)."""
    token, secret = make_token(ctx.store, request, ctx.wall_clock.now())
    return {**_token(token), "token": secret}


@router.get("/tokens")
def list_tokens(ctx: Ctx, who: Admin) -> dict[str, Any]:
    """Every token (never the secrets)."""
    return {"tokens": [_token(t) for t in ctx.store.tokens()]}


@router.post("/tokens/{token_id}/revoke")
def revoke_token(token_id: str, ctx: Ctx, who: Admin) -> dict[str, Any]:
    """Revoke a token: it stops working at once."""
    revoked = ctx.store.revoke_token(token_id, at=ctx.wall_clock.now())
    ctx.forget_tokens()
    return _token(revoked)


@router.get("/offerings", tags=["offerings"])
def list_offerings(
    ctx: Ctx,
    who: Person,
    accelerator: Annotated[str | None, Query(max_length=64)] = None,
    market: Annotated[Market | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    """Current prices with their source and age, cheapest first; an offering that refused
    launches for capacity carries ``backoff``: its refusals in a row, since when, when it is
    probed again, and when plans expect room (a spot drought's expected end, a pool's
    opening) — what the scheduler now counts in every plan there; a spot offering the
    scheduler has seen carries ``spot_market``: up or down now and since when, the periods
    seen, their mean lengths, and the hazards the spot decider reads (per hour, by age); a
    pooled offering carries ``pool``: its settings and the instances idling warm now."""
    now = ctx.clock.now()
    pools = {v.settings.name: v for v in ctx.snapshot().pools}
    backoffs = {b.offering_id: b for b in ctx.store.backoffs()}
    markets = {m.offering_id: m for m in ctx.store.markets()}
    live: dict[str, PricePoint] = {}
    for point in ctx.store.price_points(since=now):  # the live price in force now, if any
        if point.at <= now or point.offering_id not in live:
            live[point.offering_id] = point
    rows = [
        o
        for o in ctx.catalog.offerings
        if (accelerator is None or o.accelerator.lower().startswith(accelerator.lower()))
        and (market is None or o.market is market)
    ]
    rows.sort(key=lambda o: (o.usd_per_hour, o.id))
    return {
        "offerings": [
            {
                "id": o.id,
                "provider": o.provider,
                "region": o.region,
                "instance_type": o.instance_type,
                "accelerator": o.accelerator,
                "accelerators_per_instance": o.accelerators_per_instance,
                "market": o.market.value,
                **_price(o, live.get(o.id), now, ctx.max_price_age_seconds),
                "interruption_per_hour": o.interruption_per_hour,
                "backoff": _backoff(backoffs[o.id]) if o.id in backoffs else None,
                "spot_market": _market(markets[o.id], now) if o.id in markets else None,
                "pool": _pool(pools[o.id]) if o.id in pools else None,
            }
            for o in rows[:limit]
        ]
    }


def _pool(view: PoolView) -> dict[str, Any]:
    s = view.settings
    return {
        "min": s.minimum,
        "max": s.maximum,
        "idle_timeout_seconds": s.idle_timeout_seconds,
        "batch_wait_seconds": s.batch_wait_seconds,
        "batch_wait_seconds_by_tier": {t.name: w for t, w in s.batch_wait_by_tier},
        "warm_instances": view.idle,
        "warm_data": dict(view.data),
        "team": s.team,
        "warm": [
            {"at": w.cron, "instances": w.instances, "for_seconds": w.seconds} for w in s.warm
        ],
    }


def _price(
    o: Offering, point: PricePoint | None, now: datetime, max_age_seconds: float
) -> dict[str, Any]:
    """The price plans are made at: the live one kept from the clouds' feeds when there is one
    (``price_stale`` past the configured age), else the catalog's."""
    if point is not None:
        age = (now - point.at).total_seconds()
        return {
            "usd_per_hour": format(point.usd_per_hour.normalize(), "f"),
            "price_source": point.source,
            "price_observed_at": point.at.isoformat(),
            "price_age_seconds": age,
            "price_stale": age > max_age_seconds,
            "catalog_usd_per_hour": str(o.usd_per_hour),
        }
    observed = o.price.observed_at
    return {
        "usd_per_hour": str(o.usd_per_hour),
        "price_source": o.price.source,
        "price_observed_at": observed.isoformat() if observed else None,
        "price_age_seconds": (now - observed).total_seconds() if observed else None,
        "price_stale": False,
        "catalog_usd_per_hour": str(o.usd_per_hour),
    }


def _market(m: MarketHistory, now: datetime) -> dict[str, Any]:
    """What the spot decider knows of one market (hazards per hour on a 0.05 h grid, age
    buckets of a 0.2 h changeover)."""
    step, changeover = 0.05, 0.2
    chain = m.estimate(now, step, changeover)
    nb = len(chain.bucket_steps)
    edges = [f"age>={e * step:g}h" for e in chain.bucket_steps]
    return {
        "up": m.up,
        "since": m.since.isoformat() if m.since else None,
        "sightings": m.observations,
        "periods": len(m.periods),
        "mean_uptime_hours": mean_hours(m.periods, True),
        "mean_outage_hours": mean_hours(m.periods, False),
        "last_uptime_hours": m.last_uptime_hours(),
        "hazard_per_hour": {
            "up_to_down": {
                e: round(chain.transition[b, nb] / step, 4) for b, e in enumerate(edges)
            },
            "down_to_up": {
                e: round(chain.transition[nb + b, 0] / step, 4) for b, e in enumerate(edges)
            },
        },
    }


def _backoff(b: OfferingBackoff) -> dict[str, Any]:
    return {
        "refusals": b.misses,
        "since": b.since.isoformat(),
        "retry_after": b.until.isoformat(),
        "room_expected_at": b.room_at.isoformat() if b.room_at else None,
        "instances": b.instances,
    }
