"""The dashboard at ``/``: one server-rendered page (Jinja2, charts as inline SVG, no front-end
build). It shows what the caller's token may see: budgets with burn-down, forecast and limit
lines, the queue by tier with hold reasons, running jobs with progress and ETA against the
deadline, recent preemptions, savings against on-demand, and each pool's size over the last day
with its warm starts and idle cost.

A browser cannot send a bearer header: the login form opens a server-side session
(:mod:`budgeteer.api.sessions`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Cookie, Header, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, select_autoescape

from budgeteer.api.auth import Principal, authenticate
from budgeteer.api.deps import Ctx
from budgeteer.api.problems import Problem
from budgeteer.api.sessions import (
    COOKIE,
    close_session,
    open_session,
    session_length,
    session_principal,
)
from budgeteer.api.views import budget_status, job_view
from budgeteer.clock import Clock, simulated_time
from budgeteer.display import usd, when
from budgeteer.domain.job import JobState
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.ledger.pools import PoolHistory, pool_history
from budgeteer.ledger.waste import spend_by_job, waste_usd

router = APIRouter(include_in_schema=False)
_env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))


_env.filters["usd"] = usd
_env.filters["when"] = when

PAGE = _env.from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>budgeteer</title>
<meta http-equiv="refresh" content="10">
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222;max-width:1100px}
h1{font-size:1.4rem} h2{font-size:1.1rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:.9rem}
td,th{padding:.25rem .5rem;border-bottom:1px solid #eee;text-align:left}
.num{text-align:right;font-variant-numeric:tabular-nums}
.risk{color:#b00020;font-weight:600} .ok{color:#1b7f3b}
.bar{background:#eee;width:140px;height:10px;display:inline-block}
.bar span{background:#3b6fd1;height:10px;display:block}
.cards{display:flex;gap:1rem;flex-wrap:wrap} .card{border:1px solid #ddd;padding:.6rem .9rem}
</style></head><body>
<h1>budgeteer <small>as of {{ now }}</small></h1>
<div class="cards">
 <div class="card">accrued <b id="accrued">${{ totals.accrued }}</b></div>
 <div class="card">on-demand equivalent <b>${{ totals.on_demand }}</b></div>
 <div class="card">savings <b id="savings">${{ totals.savings }}</b></div>
 <div class="card">waste (runs a gate stopped) <b id="waste">${{ totals.waste }}</b></div>
</div>
<h2>Budgets</h2>
{% for b in budgets %}
<section class="budget" data-budget="{{ b.id }}">
<h3>{{ b.id }} — accrued ${{ b.accrued_usd | usd }}, committed ${{ b.committed_usd | usd }},
forecast ${{ b.forecast_usd | usd }},
remaining ${{ b.remaining_usd | usd }} of ${{ b.limit_usd | usd }}
{% if b.over %}<span class="risk badge">forecast over the limit</span>{% endif %}</h3>
{{ b.svg | safe }}
{% if b.held_jobs %}<p>holding: {{ b.held_jobs | join(", ") }}</p>{% endif %}
</section>
{% else %}<p>No budgets.</p>{% endfor %}
<h2>Queue</h2>
<table id="queue"><tr><th>tier</th><th>job</th><th>team</th><th>state</th><th>why</th></tr>
{% for j in queue %}<tr data-job="{{ j.id }}"><td>{{ j.priority }}</td><td>{{ j.id }}</td>
<td>{{ j.team }}</td><td>{{ j.state }}</td><td>{{ j.hold_reason or "" }}</td></tr>
{% else %}<tr><td colspan="5">empty</td></tr>{% endfor %}</table>
<h2>Running</h2>
<table id="running"><tr><th>job</th><th>placement</th><th>progress</th><th>ETA</th>
<th>deadline</th><th class="num">accrued</th></tr>
{% for j in running %}<tr data-job="{{ j.id }}"><td>{{ j.id }}</td>
<td>{{ j.where }}</td>
<td><span class="bar"><span style="width:{{ j.pct }}%"></span></span> {{ j.pct }}%</td>
<td class="{{ 'risk' if j.deadline_risk else 'ok' }}">{{ j.eta | when }}</td>
<td>{{ j.deadline | when }}</td><td class="num">${{ j.cost.accrued_usd | usd }}</td></tr>
{% else %}<tr><td colspan="6">nothing running</td></tr>{% endfor %}</table>
{% if pools %}<h2>Pools</h2>
<p>Instances held by each pool over the last {{ pool_hours }} hours: busy with a job (blue),
idling warm (grey, billed as idle).</p>
<table id="pools"><tr><th>offering</th><th class="num">max</th><th class="num">busy now</th>
<th class="num">warm now</th><th class="num">launches</th><th class="num">warm starts</th>
<th class="num">idle hours</th><th class="num">idle cost</th></tr>
{% for p in pools %}<tr data-pool="{{ p.id }}"><td>{{ p.id }}</td>
<td class="num">{{ p.max if p.max is not none else "—" }}</td><td class="num">{{ p.busy }}</td>
<td class="num">{{ p.warm }}</td><td class="num">{{ p.launches }}</td>
<td class="num warm-starts">{{ p.warm_starts }}</td><td class="num">{{ p.idle_hours }}</td>
<td class="num idle-usd">${{ p.idle_usd | usd }}</td></tr>
<tr><td colspan="8">{{ p.svg | safe }}</td></tr>{% endfor %}</table>{% endif %}
<h2>Recent preemptions</h2>
<table id="preemptions"><tr><th>job</th><th>offering</th><th>ended</th><th>reason</th></tr>
{% for a in preemptions %}<tr><td>{{ a.job_id }}</td><td>{{ a.offering_id }}</td>
<td>{{ a.ended_at | when }}</td><td>{{ a.exit_reason }}</td></tr>
{% else %}<tr><td colspan="4">none</td></tr>{% endfor %}</table>
<h2>Recent signals</h2>
<table id="signals"><tr><th>at</th><th>model</th><th>kind</th><th>severity</th><th>caused</th></tr>
{% for s in signals %}<tr><td>{{ s.at | when }}</td><td>{{ s.model }}</td><td>{{ s.kind }}</td>
<td>{{ s.severity }}</td><td>{{ s.action }}{% if s.job_id %} {{ s.job_id }}{% endif %}</td></tr>
{% else %}<tr><td colspan="5">none</td></tr>{% endfor %}</table>
<h2>Finished</h2>
<table id="finished"><tr><th>job</th><th>state</th><th>why</th><th>markets</th>
<th class="num">cost</th><th class="num">on-demand equivalent</th></tr>
{% for j in finished %}<tr data-job="{{ j.id }}"><td>{{ j.id }}</td><td>{{ j.state }}</td>
<td>{{ j.ended_why or "" }}</td>
<td>{{ j.market_history | join(" → ") }}</td><td class="num">${{ j.cost.accrued_usd | usd }}</td>
<td class="num">${{ j.cost.on_demand_equivalent_usd | usd }}</td></tr>
{% else %}<tr><td colspan="6">none yet</td></tr>{% endfor %}</table>
</body></html>""")


LOGIN = _env.from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>budgeteer — log in</title>
<style>body{font-family:system-ui,sans-serif;margin:3rem auto;max-width:26rem;color:#222}
input{width:100%;padding:.4rem;margin:.4rem 0;box-sizing:border-box}
.err{color:#b00020}</style></head><body>
<h1>budgeteer</h1>
{% if message %}<p class="err">{{ message }}</p>{% endif %}
<form method="post" action="/login">
<label for="token">API token (team or admin)</label>
<input id="token" name="token" type="password" autocomplete="current-password" required
 maxlength="512" autofocus>
<button type="submit">Log in</button>
</form></body></html>""")


def _login_page(message: str = "", status: int = 200) -> HTMLResponse:
    return HTMLResponse(LOGIN.render(message=message), status_code=status)


def _who(ctx: Ctx, authorization: str | None, session: str | None) -> Principal | None:
    if authorization:
        who = authenticate(
            authorization, lookup=ctx.token, admin_token=ctx.admin_token, secret_key=ctx.secret_key
        )
    else:
        who = session_principal(ctx, session)
    return None if who is None or who.job_id is not None else who


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    """The login form. A token in the URL is refused (it would land in logs and history)."""
    if "token" in request.query_params:
        return _login_page(
            "A token does not go in the address: it would be kept in logs and browser history. "
            "Paste it here instead.",
            400,
        )
    return _login_page()


@router.post("/login", response_class=HTMLResponse, response_model=None)
async def login(request: Request, ctx: Ctx) -> Response:
    """Check the token from the form and open a session (cookie), then go to the dashboard."""
    origin = request.headers.get("origin")
    if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
        return _login_page("This form may only be posted from this site.", 403)
    body = (await request.body()).decode("utf-8", "replace")
    token = (parse_qs(body, max_num_fields=8).get("token") or [""])[0].strip()
    header = f"Bearer {token}" if token and len(token) <= 512 else None
    who = authenticate(
        header, lookup=ctx.token, admin_token=ctx.admin_token, secret_key=ctx.secret_key
    )
    if who is None or who.job_id is not None:
        return _login_page("That token is not valid (or was revoked).", 401)
    session_id = await run_in_threadpool(open_session, ctx, who, token)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(session_length(ctx).total_seconds()),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(ctx: Ctx, budgeteer_session: Annotated[str | None, Cookie()] = None) -> RedirectResponse:
    """End the session everywhere and go back to the login form."""
    close_session(ctx, budgeteer_session)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, httponly=True, samesite="strict")
    return response


def as_of(clock: Clock) -> str:
    """When the page was made, for people: wall-clock time; where the service runs on an
    accelerated clock (the sandbox's ``time_scale``), its time is shown beside it, labelled."""
    simulated = simulated_time(clock)
    if simulated is None:
        return f"{clock.now():%Y-%m-%d %H:%M:%S} UTC"
    shown = f"{simulated.clock_now:%Y-%m-%d %H:%M:%S} UTC"
    return (
        f"{simulated.wall_now:%Y-%m-%d %H:%M:%S} UTC "
        f"(simulated clock: {shown}, {simulated.scale:g}× real time)"
    )


@router.get("/", response_class=HTMLResponse, response_model=None)
def dashboard(
    request: Request,
    ctx: Ctx,
    authorization: Annotated[str | None, Header()] = None,
    budgeteer_session: Annotated[str | None, Cookie()] = None,
) -> Response:
    """The dashboard page (a browser without a session goes to the login form)."""
    who = _who(ctx, authorization, budgeteer_session)
    if who is None:
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse("/login", status_code=303)
        raise Problem(401, "log in at /login, or send a bearer token")
    jobs = [j for j in ctx.store.jobs() if who.sees_team(j.team)]
    views = {j.id: job_view(ctx, j) for j in jobs}
    budgets = []
    for spec in ctx.store.budget_specs():
        team = spec.get("scope", {}).get("team")
        if who.admin or team in who.teams:
            status = budget_status(ctx, spec["id"], spec)
            over = Decimal(str(status["forecast_usd"])) > Decimal(str(status["limit_usd"]))
            budgets.append({**status, "svg": burn_down_svg(status), "over": over})
    queue = sorted(
        (views[j.id] for j in jobs if j.state.is_pending),
        key=lambda v: (v["priority"], v["submitted_at"]),
    )
    running = []
    for j in jobs:
        if j.state.is_active:
            v = views[j.id]
            p = v["placement"] or {}
            v["pct"] = round(100 * (v["progress"] or {}).get("fraction", 0.0))
            kind = p.get("instance_type", p.get("offering_id", ""))
            v["where"] = f"{p.get('instances', 1)}× {kind} {p.get('market', '')}"
            running.append(v)
    finished = []
    for j in jobs:
        if j.state.is_terminal:
            v = views[j.id]
            if j.state is not JobState.SUCCEEDED:  # why it failed, was cancelled or stopped
                events = ctx.store.events(j.id)
                v["ended_why"] = events[-1].cause if events else None
            finished.append(v)
    preemptions = sorted(
        (
            a
            for a in ctx.store.attempts()
            if a.outcome is AttemptOutcome.PREEMPTED and a.job_id in views
        ),
        key=lambda a: a.ended_at or a.started_at,
        reverse=True,
    )[:10]
    accrued = sum((Decimal(v["cost"]["accrued_usd"]) for v in views.values()), Decimal(0))
    od = sum((Decimal(v["cost"]["on_demand_equivalent_usd"]) for v in views.values()), Decimal(0))
    html = PAGE.render(
        now=as_of(ctx.clock),
        totals={
            "accrued": usd(accrued),
            "on_demand": usd(od),
            "savings": usd(od - accrued),
            "waste": usd(
                waste_usd(
                    {j.id: j for j in jobs},
                    spend_by_job((e.job_id, e.amount_usd) for e in ctx.store.ledger()),
                )
            ),
        },
        budgets=budgets,
        queue=queue,
        running=running,
        finished=finished,
        preemptions=preemptions,
        signals=[r for r in ctx.store.signals(limit=200) if who.sees_team(r.team)][:10],
        pools=_pools(ctx, set(views), who.sees_team),
        pool_hours=POOL_HOURS,
    )
    return HTMLResponse(html)


POOL_HOURS = 24


def _pools(ctx: Ctx, visible: set[str], sees: Callable[[str], bool]) -> list[dict[str, Any]]:
    """The pooled offerings' rows: settings, now, and the last :data:`POOL_HOURS` hours of the
    caller's jobs there and of what the pools booted for the caller's teams (a team sees its
    own share of a shared pool)."""
    views = ctx.snapshot().pools
    if not views:
        return []
    now = ctx.clock.now()
    attempts = [a for a in ctx.store.attempts() if a.job_id in visible]
    ledger = [e for e in ctx.store.ledger() if e.job_id in visible]
    history = pool_history(
        (v.settings.name for v in views),
        attempts,
        ledger,
        now - timedelta(hours=POOL_HOURS),
        now,
        [c for c in ctx.store.pool_charges() if sees(c.team)],
    )
    rows = []
    for v in views:
        h = history[v.settings.name]
        busy = h.steps[-1][1]
        rows.append(
            {
                "id": v.settings.name,
                "max": v.settings.maximum,
                "busy": busy,
                "warm": v.idle,
                "launches": h.launches,
                "warm_starts": h.warm_starts,
                "idle_hours": f"{h.idle_hours:.2f}",
                "idle_usd": h.idle_usd,
                "svg": pool_svg(h, now, v.settings.maximum),
            }
        )
    return rows


def pool_svg(history: PoolHistory, until: datetime, maximum: int | None) -> str:
    """A pool's instances over the window as an inline SVG: busy (blue) and busy + idle (grey)
    as step lines, the pool's ``max`` (red) when it has one."""
    width, height = 640, 90
    start = history.steps[0][0]
    span = (until - start).total_seconds() or 1.0
    top = max([maximum or 0, 1, *(b + i for _, b, i in history.steps)])

    def x(at: datetime) -> float:
        return 40 + (width - 50) * (at - start).total_seconds() / span

    def y(n: int) -> float:
        return height - 15 - (height - 25) * n / top

    def line(pick: int) -> str:
        pts: list[str] = []
        for k, step in enumerate(history.steps):
            n = step[1] + (step[2] if pick else 0)
            nxt = history.steps[k + 1][0] if k + 1 < len(history.steps) else until
            pts += [f"{x(step[0]):.1f},{y(n):.1f}", f"{x(nxt):.1f},{y(n):.1f}"]
        return " ".join(pts)

    cap = ""
    if maximum is not None:
        cap = (
            f'<line x1="40" x2="{width - 10}" y1="{y(maximum):.1f}" y2="{y(maximum):.1f}" '
            f'stroke="#b00020" stroke-dasharray="2 2"/>'
            f'<text x="42" y="{y(maximum) - 3:.1f}" font-size="10" fill="#b00020">'
            f"max {maximum}</text>"
        )
    return (
        f'<svg class="pool-size" width="{width}" height="{height}" role="img" '
        f'aria-label="instances in the pool {history.offering_id}">{cap}'
        f'<polyline class="held" fill="none" stroke="#999" stroke-width="2" '
        f'points="{line(1)}"/>'
        f'<polyline class="busy" fill="none" stroke="#3b6fd1" stroke-width="2" '
        f'points="{line(0)}"/>'
        f'<text x="40" y="{height - 3}" font-size="10">{start:%m-%d %H:%M}</text>'
        f'<text x="{width - 10}" y="{height - 3}" font-size="10" text-anchor="end">'
        f"{until:%m-%d %H:%M}</text></svg>"
    )


def burn_down_svg(status: dict[str, Any], width: int = 640, height: int = 160) -> str:
    """Accrued spend over the period (solid), its forecast to the period's end (dashed), and the
    limit (red), as an inline SVG."""
    start = datetime.fromisoformat(status["period_start"])
    end = datetime.fromisoformat(status["period_end"])
    limit = float(status["limit_usd"])
    forecast = float(status["forecast_usd"])
    points = [
        (datetime.fromisoformat(p["at"]), float(p["accrued_usd"])) for p in status["burn_down"]
    ]
    top = max([limit, forecast, *(v for _, v in points)]) * 1.1 or 1.0
    span = (end - start).total_seconds() or 1.0

    def xy(at: datetime, usd: float) -> str:
        x = 40 + (width - 50) * (at - start).total_seconds() / span
        y = height - 20 - (height - 30) * usd / top
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(at, v) for at, v in [(start, 0.0), *points])
    last = points[-1] if points else (start, 0.0)
    ly = xy(start, limit).split(",")[1]
    return (
        f'<svg class="burn-down" width="{width}" height="{height}" role="img" '
        f'aria-label="burn-down of {status["id"]}">'
        f'<line x1="40" x2="{width - 10}" y1="{ly}" y2="{ly}" stroke="#b00020"/>'
        f'<text x="42" y="{float(ly) - 4:.1f}" font-size="11" fill="#b00020">'
        f"limit ${limit:,.0f}</text>"
        f'<polyline class="accrued" fill="none" stroke="#3b6fd1" stroke-width="2" '
        f'points="{line}"/>'
        f'<polyline class="forecast" fill="none" stroke="#3b6fd1" stroke-dasharray="4 3" '
        f'points="{xy(*last)} {xy(end, forecast)}"/>'
        f'<text x="{width - 10}" y="{height - 5}" font-size="11" text-anchor="end">'
        f"{end:%Y-%m-%d}</text>"
        f'<text x="40" y="{height - 5}" font-size="11">{start:%Y-%m-%d}</text></svg>'
    )
