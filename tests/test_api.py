"""The REST API over real SQLite and PostgreSQL: happy paths, idempotency, pagination, team
isolation on every endpoint, validation errors naming their field, the body limit, tokens,
metrics and the dashboard."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api_world import ADMIN, CATALOG, SECRET, World, bill, job_spec
from budgeteer.api.auth import job_token
from budgeteer.core.speed import Speed
from budgeteer.core.spot.decide import Situation
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.store import LedgerEntry, OfferingBackoff, SpotDecisionRecord


def test_submit_follow_explain_and_cancel(world: World) -> None:
    g = world.auth(world.growth)
    r = world.http.post("/v1/jobs", json=job_spec(), headers=g)
    assert r.status_code == 201, r.text
    handle = r.json()
    assert handle["state"] == "submitted"
    assert handle["links"]["self"] == f"/v1/jobs/{handle['id']}"
    job = world.http.get(handle["links"]["self"], headers=g).json()
    assert (job["team"], job["priority"], job["state"]) == ("growth", "P1", "submitted")
    assert job["cost"]["accrued_usd"] == "0.000000"
    why = world.http.get(handle["links"]["explain"], headers=g).json()
    assert why["decision"] == "admit"
    assert why["numbers"]["expected_cost_usd"] > 0
    assert why["numbers"]["finish"] <= job["deadline"]
    assert why["spot_decision"] is None  # nothing decided about spot yet
    events = world.http.get(handle["links"]["events"], headers=g).json()["events"]
    assert [e["to"] for e in events] == ["submitted"]
    r = world.http.post(handle["links"]["cancel"], headers=g)
    assert (r.status_code, r.json()["state"]) == (202, "cancelled")


def test_explain_gives_the_spot_deciders_latest_move_as_data(world: World) -> None:
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    now = world.clock.now()
    waited = Situation(4.0, 6.0, 0.2, 0.9, 3.06, 0.5, 0.25, Mode.IDLE, 0.0, False, 0.5, 1 / 60)
    late = dataclasses.replace(waited, elapsed_hours=1.9, last_uptime_hours=0.25)
    for at, situation in ((now, waited), (now + timedelta(minutes=5), late)):
        world.store.add_spot_decision(
            SpotDecisionRecord(
                job_id, None, at, "take_on_demand", "aws/p3/spot", Mode.ON_DEMAND, situation
            )
        )
    world.store.add_spot_decision(  # another job's: not this one's
        SpotDecisionRecord("other", 3, now, "to_spot", "aws/p3/spot", Mode.SPOT, waited)
    )
    why = world.http.get(f"/v1/jobs/{job_id}/explain", headers=g).json()["spot_decision"]
    assert why["at"] == (now + timedelta(minutes=5)).isoformat()  # the latest
    assert (why["action"], why["held"], why["decided"]) == ("take_on_demand", "idle", "on_demand")
    assert why["attempt_id"] is None
    assert why["spot_offering_id"] == "aws/p3/spot"
    assert why["numbers"]["elapsed_hours"] == 1.9
    assert why["numbers"]["slack_hours"] == pytest.approx(6.0 - 1.9 - 3.75)
    assert why["numbers"]["spot_up"] is False
    assert why["numbers"]["last_uptime_hours"] == 0.25  # kept with the rest of the situation
    assert why["reason"].startswith("spot decider: take on-demand now (spot down 30 min")
    assert why["safety_net"] is None


def test_explain_shows_the_familys_measured_speed_beside_the_catalogs(world: World) -> None:
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    name = world.store.job(job_id).name
    world.store.put_speed(Speed(name, "A100").observe(0.5))
    world.store.put_speed(Speed(name, "T4").observe(1.02))
    world.store.put_speed(Speed("someone-else", "A100").observe(3.0))
    why = world.http.get(f"/v1/jobs/{job_id}/explain", headers=g).json()
    speeds = {s["accelerator"]: s for s in why["speeds"]}
    assert set(speeds) == {"A100", "T4"}
    a100 = speeds["A100"]
    assert a100["measured_factor"] == 0.75
    assert a100["catalog_relative_throughput"] == CATALOG.throughput["A100"]
    assert a100["measured_relative_throughput"] == round(CATALOG.throughput["A100"] * 0.75, 4)
    assert (a100["runs"], a100["planned_with"]) == (1, True)
    assert speeds["T4"]["planned_with"] is False  # within 3% of the catalog


def test_idempotency_keys(world: World) -> None:
    g = {**world.auth(world.growth), "Idempotency-Key": "drift-2026-12-02"}
    first = world.http.post("/v1/jobs", json=job_spec(), headers=g)
    again = world.http.post("/v1/jobs", json=job_spec(), headers=g)
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = world.http.post("/v1/jobs", json=job_spec(priority="P0"), headers=g)
    assert other.status_code == 409
    assert other.headers["content-type"] == "application/problem+json"
    # another team's token with the same key is another request
    s = {**world.auth(world.search), "Idempotency-Key": "drift-2026-12-02"}
    theirs = world.http.post("/v1/jobs", json=job_spec(team="search"), headers=s)
    assert theirs.status_code == 201
    assert theirs.json()["id"] != first.json()["id"]
    assert len(world.store.jobs()) == 2


def test_pagination_walks_every_job_once(world: World) -> None:
    g = world.auth(world.growth)
    ids = [
        world.http.post("/v1/jobs", json=job_spec(f"j{i}"), headers=g).json()["id"]
        for i in range(7)
    ]
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        doc = world.http.get("/v1/jobs", params=params, headers=g).json()
        seen += [j["id"] for j in doc["jobs"]]
        pages += 1
        cursor = doc["next_cursor"]
        if not cursor:
            break
    assert seen == ids
    assert pages == 3
    bad = world.http.get("/v1/jobs", params={"cursor": "bm9wZQ"}, headers=g)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "query.cursor"
    p1 = world.http.get("/v1/jobs", params={"priority": "P1", "state": "submitted"}, headers=g)
    assert len(p1.json()["jobs"]) == 7
    assert world.http.get("/v1/jobs", params={"priority": "P0"}, headers=g).json()["jobs"] == []


def test_a_team_token_never_sees_or_touches_another_team(world: World) -> None:
    g, s = world.auth(world.growth), world.auth(world.search)
    theirs = world.http.post("/v1/jobs", json=job_spec(team="search"), headers=s).json()["id"]
    world.http.post(
        "/v1/budgets",
        json={"id": "search-monthly", "scope": {"team": "search"}, "limit_usd": 100},
        headers=world.auth(ADMIN),
    )
    for method, path in [
        ("GET", f"/v1/jobs/{theirs}"),
        ("GET", f"/v1/jobs/{theirs}/events"),
        ("GET", f"/v1/jobs/{theirs}/explain"),
        ("POST", f"/v1/jobs/{theirs}/cancel"),
        ("POST", f"/v1/jobs/{theirs}/progress"),
        ("GET", "/v1/budgets/search-monthly"),
        ("GET", "/v1/budgets/search-monthly/status"),
    ]:
        r = world.http.request(
            method, path, headers=g, json={"step": 1} if "progress" in path else None
        )
        assert r.status_code == 404, (method, path, r.status_code)
    for method, path, body in [
        ("POST", "/v1/budgets", {"id": "x", "scope": {"team": "growth"}, "limit_usd": 1}),
        ("PATCH", "/v1/budgets/search-monthly", {"limit_usd": 1}),
        ("POST", "/v1/tokens", {"name": "mine", "teams": ["search"]}),
        ("GET", "/v1/tokens", None),
        ("POST", "/v1/jobs", job_spec(team="search")),
        ("POST", "/v1/pipelines", {"name": "p", "jobs": [job_spec(team="search")]}),
    ]:
        r = world.http.request(method, path, headers=g, json=body)
        assert r.status_code == 403, (method, path, r.status_code)
    assert world.http.get("/v1/jobs", headers=g).json()["jobs"] == []
    assert world.http.get("/v1/jobs", params={"team": "search"}, headers=g).json()["jobs"] == []
    assert world.http.get("/v1/budgets", headers=g).json()["budgets"] == []
    assert world.store.job(theirs).state.value == "submitted"  # untouched


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"work": {"reference_hours": -1}}, "work.reference_hours"),
        ({"resources": {"workers": {"min": 4, "max": 2}}}, "resources.workers"),
        ({"resources": {"accelerators": ["A1000"]}}, "resources.accelerators[0]"),
        ({"priority": "P9"}, "priority"),
        ({"sla": "soon"}, "sla"),
        ({"sla": None, "deadline": "2020-01-01T00:00:00Z"}, "deadline"),
        ({"depends_on": [{"job": "nope"}]}, "depends_on[0].job"),
        ({"command": [3]}, "command[0]"),
        ({"name": "has space"}, "name"),
    ],
)
def test_validation_errors_name_their_field(
    world: World, change: dict[str, object], field: str
) -> None:
    r = world.http.post("/v1/jobs", json=job_spec(**change), headers=world.auth(world.growth))
    assert r.status_code == 422, r.text
    doc = r.json()
    assert r.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in doc["errors"]], doc
    assert doc["status"] == 422
    assert world.store.jobs() == []  # nothing written


def test_malformed_and_oversized_bodies(world: World) -> None:
    g = {**world.auth(world.growth), "Content-Type": "application/json"}
    r = world.http.post("/v1/jobs", content=b"{not json", headers=g)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "(body)"
    huge = job_spec(command=["x" * 100_000])
    r = world.http.post("/v1/jobs", json=huge, headers=world.auth(world.growth))
    assert r.status_code == 413
    assert "64" in r.json()["detail"] or "65536" in r.json()["detail"]
    assert world.store.jobs() == []


def test_tokens_authenticate_and_can_be_revoked(world: World) -> None:
    assert world.http.get("/v1/jobs").status_code == 401
    assert world.http.get("/v1/jobs", headers=world.auth("bgt_wrong")).status_code == 401
    tokens = world.http.get("/v1/tokens", headers=world.auth(ADMIN)).json()["tokens"]
    assert all("token" not in t for t in tokens)  # secrets are never shown again
    growth_id = next(t["id"] for t in tokens if t["teams"] == ["growth"])
    assert (
        world.http.post(f"/v1/tokens/{growth_id}/revoke", headers=world.auth(ADMIN)).status_code
        == 200
    )
    assert world.http.get("/v1/jobs", headers=world.auth(world.growth)).status_code == 401


def test_job_tokens_only_report_their_own_progress(world: World) -> None:
    g = world.auth(world.growth)
    mine = world.http.post("/v1/jobs", json=job_spec("a"), headers=g).json()["id"]
    other = world.http.post("/v1/jobs", json=job_spec("b"), headers=g).json()["id"]
    jt = world.auth(job_token(SECRET, mine))
    r = world.http.post(
        f"/v1/jobs/{mine}/progress", json={"step": 5, "total_steps": 10, "loss": 0.4}, headers=jt
    )
    assert r.status_code == 202
    assert (
        world.http.post(f"/v1/jobs/{other}/progress", json={"step": 1}, headers=jt).status_code
        == 403
    )
    assert world.http.get(f"/v1/jobs/{mine}", headers=jt).status_code == 403
    forged = world.auth(f"job.{other}.{'0' * 64}")
    assert (
        world.http.post(f"/v1/jobs/{other}/progress", json={"step": 1}, headers=forged).status_code
        == 401
    )
    view = world.http.get(f"/v1/jobs/{mine}", headers=g).json()
    assert view["progress"]["fraction"] == 0.5
    assert view["progress"]["loss"] == 0.4


def test_pipelines_keep_their_dag_and_reject_cycles(world: World) -> None:
    g = world.auth(world.growth)
    steps = ["features", "train", "validate", "package"]
    specs = [
        job_spec(name, depends_on=[{"job": steps[i - 1]}] if i else [])
        for i, name in enumerate(steps)
    ]
    r = world.http.post("/v1/pipelines", json={"name": "churn", "jobs": specs}, headers=g)
    assert r.status_code == 201, r.text
    handles = r.json()["jobs"]
    train = world.store.job(handles["train"]["id"])
    assert [d.job for d in train.depends_on] == [handles["features"]["id"]]
    assert train.project == "churn"
    specs[0]["depends_on"] = [{"job": "package"}]
    r = world.http.post("/v1/pipelines", json={"name": "loop", "jobs": specs}, headers=g)
    assert r.status_code == 422
    assert "dependency cycle" in r.json()["detail"]
    assert "features" in r.json()["detail"]


def test_explain_shows_the_time_a_pipeline_step_keeps_for_the_steps_after_it(
    world: World,
) -> None:
    g = world.auth(world.growth)
    steps = ["features", "train", "validate", "package"]
    specs = [
        job_spec(name, sla="24h", depends_on=[{"job": steps[i - 1]}] if i else [])
        for i, name in enumerate(steps)
    ]
    r = world.http.post("/v1/pipelines", json={"name": "churn", "jobs": specs}, headers=g)
    assert r.status_code == 201, r.text
    first = r.json()["jobs"]["features"]["id"]
    why = world.http.get(f"/v1/jobs/{first}/explain", headers=g).json()
    assert why["decision"] == "admit"
    # the three steps after it at reference speed are 2 ref-h each plus a start-up: 6.3 h; on
    # this catalog the next step's cheapest plan is slower than reference, so it keeps more
    # and says why
    assert why["pipeline_reserve_hours"] > 3 * (2 + 0.1)
    assert why["pipeline_reserve_why"].startswith("not 6.3 h: their cheapest plans need that")
    deadline = world.store.job(first).deadline
    assert deadline is not None
    kept = timedelta(hours=why["pipeline_reserve_hours"])
    assert why["numbers"]["finish"] <= (deadline - kept).isoformat()


def test_budgets_and_their_status(world: World) -> None:
    a, g = world.auth(ADMIN), world.auth(world.growth)
    spec = {"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 1000}
    assert world.http.post("/v1/budgets", json=spec, headers=a).status_code == 201
    assert world.http.post("/v1/budgets", json=spec, headers=a).status_code == 409
    r = world.http.patch("/v1/budgets/growth-monthly", json={"limit_usd": 50}, headers=a)
    assert (r.status_code, r.json()["limit_usd"]) == (200, "50")
    bad = world.http.patch("/v1/budgets/growth-monthly", json={"limit_usd": -5}, headers=a)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "limit_usd"
    # a P3 job too dear for 70% of $50 is held by this budget
    job = world.http.post(
        "/v1/jobs",
        json=job_spec("big", priority="P3", work={"reference_hours": 200}, sla="7d"),
        headers=g,
    ).json()
    status = world.http.get("/v1/budgets/growth-monthly/status", headers=g).json()
    assert status["limit_usd"] == "50.000000"
    assert status["held_jobs"] == [job["id"]]
    assert Decimal(status["thresholds"]["P3"]) == Decimal("0.7")
    assert world.http.get(f"/v1/jobs/{job['id']}/explain", headers=g).json()["decision"] == "hold"
    # spend shows up as accrued, and in the burn-down
    store = world.store
    attempt = store.start_attempt(
        job["id"],
        backend="sandbox",
        offering_id="x",
        market="spot",
        instance_ids=[],
        at=world.clock.now(),
    )
    store.add_ledger_entry(
        LedgerEntry(
            attempt.id,
            job["id"],
            world.clock.now(),
            world.clock.now() + timedelta(hours=1),
            Decimal("2.5"),
            Decimal("2.5"),
            "test",
        )
    )
    world.clock.advance(7200)
    status = world.http.get("/v1/budgets/growth-monthly/status", headers=g).json()
    assert status["accrued_usd"] == "2.500000"
    assert status["burn_down"][-1]["accrued_usd"] == "2.500000"
    # a finished job's spend stays in the budget and its burn-down
    world.http.post(f"/v1/jobs/{job['id']}/cancel", headers=g)
    status = world.http.get("/v1/budgets/growth-monthly/status", headers=g).json()
    assert (status["accrued_usd"], status["burn_down"][-1]["accrued_usd"]) == ("2.500000",) * 2


def test_offerings_filter(world: World) -> None:
    r = world.http.get(
        "/v1/offerings",
        params={"market": "spot", "accelerator": "A100"},
        headers=world.auth(world.growth),
    )
    rows = r.json()["offerings"]
    assert rows
    assert all(o["market"] == "spot" and o["accelerator"].startswith("A100") for o in rows)
    prices = [float(o["usd_per_hour"]) for o in rows]
    assert prices == sorted(prices)
    assert all(o["price_source"] for o in rows)
    assert all(o["backoff"] is None for o in rows)  # nothing refused yet


def test_offerings_show_a_drought_the_scheduler_counts(world: World) -> None:
    spot = next(o for o in world.ctx.catalog.offerings if o.market.value == "spot")
    now = world.clock.now()
    world.store.put_backoff(
        OfferingBackoff(
            spot.id,
            1,
            now + timedelta(minutes=10),
            7,
            now - timedelta(hours=1),
            now + timedelta(minutes=30),
        )
    )
    rows = world.http.get("/v1/offerings", headers=world.auth(world.growth)).json()["offerings"]
    (dry,) = [o for o in rows if o["backoff"] is not None]
    assert dry["id"] == spot.id
    assert dry["backoff"] == {
        "refusals": 7,
        "since": (now - timedelta(hours=1)).isoformat(),
        "retry_after": (now + timedelta(minutes=10)).isoformat(),
        "room_expected_at": (now + timedelta(minutes=30)).isoformat(),
        "instances": 1,
    }


def test_offerings_show_what_the_spot_decider_knows_of_each_market(world: World) -> None:
    spot = next(o for o in world.ctx.catalog.offerings if o.market.value == "spot")
    now = world.clock.now()
    seen = MarketHistory(spot.id)
    for k in range(6):  # up 3 h, down 30 min, three times over
        seen = seen.observe(True, now - timedelta(hours=10.5 - 3.5 * k))
        seen = seen.observe(False, now - timedelta(hours=7.5 - 3.5 * k))
    world.store.put_market(seen)
    rows = world.http.get("/v1/offerings", headers=world.auth(world.growth)).json()["offerings"]
    (watched,) = [o for o in rows if o["spot_market"] is not None]
    market = watched["spot_market"]
    assert watched["id"] == spot.id
    assert market["up"] is False
    assert market["periods"] == len(seen.periods)
    assert market["mean_uptime_hours"] == pytest.approx(3.0)
    assert market["mean_outage_hours"] == pytest.approx(0.5)
    assert market["last_uptime_hours"] == pytest.approx(3.0)  # what the flicker hold reads
    # short outages end fast: a fresh one is far likelier to end than a fresh uptime
    hazards = market["hazard_per_hour"]
    assert hazards["down_to_up"]["age>=0h"] > hazards["up_to_down"]["age>=0h"]


def test_metrics_parse_and_follow_the_ledger(world: World) -> None:
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    spot = next(o for o in world.ctx.catalog.offerings if o.market.value == "spot")
    attempt = world.store.start_attempt(
        job_id,
        backend="sandbox",
        offering_id=spot.id,
        market="spot",
        instance_ids=[],
        at=world.clock.now(),
    )
    world.store.add_ledger_entry(
        LedgerEntry(
            attempt.id,
            job_id,
            world.clock.now(),
            world.clock.now() + timedelta(hours=2),
            Decimal("1.25"),
            Decimal("2.5"),
            "test",
        )
    )
    world.store.end_attempt(
        attempt.id,
        at=world.clock.now() + timedelta(hours=2),
        exit_reason="preempted: spot capacity revoked",
        outcome=AttemptOutcome.PREEMPTED,
    )
    text = world.http.get("/metrics", headers=world.auth(ADMIN)).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(name.startswith("budgeteer_") for name in families)
    spend = families["budgeteer_spend_usd"].samples
    assert sum(s.value for s in spend if s.name.endswith("_total")) == 2.5
    assert {s.labels["team"] for s in spend} == {"growth"}
    assert families["budgeteer_preemptions"].samples[0].value == 1
    for fam in families.values():
        for sample in fam.samples:
            assert not {"job", "job_id"} & set(sample.labels)
    assert families["budgeteer_savings_usd"].samples[0].value > 0  # spot below on-demand


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.budgets: list[str] = []
        self.svgs = 0
        self._table = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("id") or ""
        if tag == "tr" and a.get("data-job"):
            self.rows.setdefault(self._table, []).append(a["data-job"] or "")
        if tag == "section" and a.get("data-budget"):
            self.budgets.append(a["data-budget"] or "")
        if tag == "svg":
            self.svgs += 1


def test_the_dashboard_renders_what_the_token_may_see(world: World) -> None:
    a, g, s = world.auth(ADMIN), world.auth(world.growth), world.auth(world.search)
    world.http.post(
        "/v1/budgets",
        json={"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 900},
        headers=a,
    )
    world.http.post(
        "/v1/budgets",
        json={"id": "search-monthly", "scope": {"team": "search"}, "limit_usd": 900},
        headers=a,
    )
    mine = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    theirs = world.http.post("/v1/jobs", json=job_spec(team="search"), headers=s).json()["id"]
    assert world.http.get("/").status_code == 401
    page = _Collect()
    r = world.http.post("/login", data={"token": world.growth})  # a session, then the page
    assert r.status_code == 200
    page.feed(r.text)
    assert page.budgets == ["growth-monthly"]
    assert page.svgs == 1
    assert page.rows["queue"] == [mine]
    assert theirs not in r.text
    admin_page = _Collect()
    admin_page.feed(world.http.get("/", headers=a).text)
    assert sorted(admin_page.budgets) == ["growth-monthly", "search-monthly"]
    assert sorted(admin_page.rows["queue"]) == sorted([mine, theirs])


def test_openapi_is_served(world: World) -> None:
    doc = world.http.get("/openapi.json").json()
    assert {"/v1/jobs", "/v1/pipelines", "/v1/budgets", "/v1/offerings"} <= set(doc["paths"])
    assert json.dumps(doc)  # serialisable


def test_the_grafana_dashboard_queries_only_exported_metrics(world: World) -> None:
    g = world.auth(world.growth)
    job_id = world.http.post("/v1/jobs", json=job_spec(), headers=g).json()["id"]
    bill(world, job_id, "1")
    world.http.post(
        "/v1/budgets",
        json={"id": "b", "scope": {"team": "growth"}, "limit_usd": 10},
        headers=world.auth(ADMIN),
    )
    world.ctx.snapshot()  # the cycle histogram is registered at app creation
    exported = {
        s.name
        for f in text_string_to_metric_families(
            world.http.get("/metrics", headers=world.auth(ADMIN)).text
        )
        for s in f.samples
    }
    dashboard = (Path(__file__).parents[1] / "deploy" / "grafana" / "budgeteer.json").read_text()
    used = set(re.findall(r"budgeteer_[a-z_]+", dashboard)) - {"budgeteer"}
    assert used
    assert used <= exported, used - exported
