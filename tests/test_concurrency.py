"""API threads read while the loop cycles: snapshots, explain, metrics and the dashboard from
several reader threads, on SQLite and PostgreSQL — no exception on either side, and every view
consistent (no job twice, one allocation per attempt, spend never going backwards)."""

from __future__ import annotations

import sys
import threading

from prometheus_client.parser import text_string_to_metric_families

from api_world import ADMIN, World, job_spec

READERS = 4
CYCLES = 40


def _spend(text: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "budgeteer_spend_usd_total"
    )


def test_readers_and_the_loop_together(world: World) -> None:
    admin = world.auth(ADMIN)
    world.http.post(
        "/v1/budgets",
        json={"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 40},
        headers=admin,
    )
    g = world.auth(world.growth)
    quick = [sys.executable, "-c", "import time; time.sleep(0.2)"]
    ids = [
        world.http.post(
            "/v1/jobs",
            json=job_spec(f"j{i}", priority=f"P{i % 4}", command=quick, sla="12h"),
            headers=g,
        ).json()["id"]
        for i in range(12)
    ]
    stop = threading.Event()
    errors: list[str] = []

    def read(n: int) -> None:
        last_spend = 0.0
        while not stop.is_set():
            try:
                snap = world.sched.snapshot()
                job_ids = [j.id for j in snap.jobs]
                assert len(job_ids) == len(set(job_ids)), "a job twice in one snapshot"
                running = [a.job_id for a in snap.running]
                assert len(running) == len(set(running)), "an allocation twice"
                r = world.http.get(f"/v1/jobs/{ids[n % len(ids)]}/explain", headers=g)
                assert r.status_code == 200, r.text
                m = world.http.get("/metrics", headers=admin)
                assert m.status_code == 200, m.text
                spend = _spend(m.text)
                assert spend >= last_spend - 1e-9, "spend went backwards"
                last_spend = spend
                assert world.http.get("/", headers=admin).status_code == 200
            except Exception as exc:  # collected, then reported by the main thread
                errors.append(f"reader {n}: {type(exc).__name__}: {exc}")
                return

    readers = [threading.Thread(target=read, args=(n,)) for n in range(READERS)]
    for t in readers:
        t.start()
    try:
        for n in range(CYCLES):
            world.sched.cycle()  # any exception here fails the test
            world.clock.advance(60)
            # a budget change each few cycles wakes parked jobs while readers build snapshots
            if n % 10 == 5:
                r = world.http.patch(
                    "/v1/budgets/growth-monthly", json={"limit_usd": 40 + n}, headers=admin
                )
                assert r.status_code == 200, r.text
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=60)
        for handle in world.sched.backend.live():  # type: ignore[attr-defined]
            world.sched.backend.stop(handle, "test over")
    assert errors == []
    assert any(world.store.attempts(i) for i in ids)  # the loop really ran jobs meanwhile
