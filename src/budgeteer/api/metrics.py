"""``/metrics``: Prometheus metrics read from the store at scrape time (so a restart never resets
a counter: they are sums over the append-only ledger and attempts), plus the scheduler's cycle
duration histogram observed in process. Names are ``budgeteer_``-prefixed, in base units, and
never labelled by job id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from decimal import Decimal

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from budgeteer.api.context import ApiContext
from budgeteer.core import HoldReason
from budgeteer.domain.job import Job, JobState
from budgeteer.domain.offering import Offering
from budgeteer.domain.outcome import AttemptOutcome
from budgeteer.domain.tier import Tier
from budgeteer.ledger.accounting import job_cost
from budgeteer.ledger.billing import is_idle
from budgeteer.ledger.waste import spend_by_job, waste_usd
from budgeteer.store import Attempt, LedgerEntry, PoolCharge


class StoreCollector(Collector):
    """Spend, budgets, queue, running jobs, preemptions, fallbacks, misses and savings."""

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """One pass over the store (and a pure plan for the budget gauges)."""
        store, now = self.ctx.store, self.ctx.clock.now()
        jobs = {j.id: j for j in store.jobs()}
        attempts = store.attempts()
        ledger = store.ledger()
        offering_of = {a.id: self.ctx.prices.offering(a.offering_id) for a in attempts}

        spend = CounterMetricFamily(
            "budgeteer_spend_usd",
            "Money accrued on compute (ledger)",
            labels=["team", "provider", "market", "instance_type"],
        )
        totals: dict[tuple[str, str, str, str], Decimal] = {}
        charges = store.pool_charges()  # what pools booted with no job: their teams'
        billed: list[tuple[str, Offering | None, LedgerEntry | PoolCharge]] = [
            (jobs[e.job_id].team if e.job_id in jobs else "", offering_of.get(e.attempt_id), e)
            for e in ledger
        ]
        billed += [(c.team, self.ctx.prices.offering(c.offering_id), c) for c in charges]
        for team, o, e in billed:
            key = (
                team,
                o.provider if o else "",
                o.market.value if o else "",
                o.instance_type if o else "",
            )
            totals[key] = totals.get(key, Decimal(0)) + e.amount_usd
        for key, usd in sorted(totals.items()):
            spend.add_metric(list(key), float(usd))
        yield spend

        yield from self._budgets()

        depth = GaugeMetricFamily("budgeteer_queue_depth", "Jobs waiting to run", labels=["tier"])
        wait = GaugeMetricFamily(
            "budgeteer_queue_oldest_wait_seconds",
            "How long the oldest waiting job of the tier has waited",
            labels=["tier"],
        )
        for tier in Tier:
            pending = [j for j in jobs.values() if j.tier is tier and j.state.is_pending]
            depth.add_metric([tier.name], len(pending))
            oldest = min((j.submitted_at for j in pending), default=now)
            wait.add_metric([tier.name], max(0.0, (now - oldest).total_seconds()))
        yield depth
        yield wait
        running = GaugeMetricFamily("budgeteer_running_jobs", "Jobs with a live attempt")
        running.add_metric([], sum(1 for j in jobs.values() if j.state.is_active))
        yield running

        outcomes = [a.outcome for a in attempts]
        preempt = CounterMetricFamily("budgeteer_preemptions", "Attempts the market preempted")
        preempt.add_metric([], outcomes.count(AttemptOutcome.PREEMPTED))
        yield preempt
        fallback = CounterMetricFamily(
            "budgeteer_on_demand_fallbacks", "Attempts moved from spot to on-demand while running"
        )
        fallback.add_metric([], outcomes.count(AttemptOutcome.TO_ON_DEMAND))
        yield fallback
        misses = CounterMetricFamily(
            "budgeteer_deadline_misses", "Jobs that ended after their deadline, or not at all"
        )
        misses.add_metric([], sum(self._missed(j) for j in jobs.values() if j.deadline))
        yield misses
        waste = CounterMetricFamily(
            "budgeteer_waste_usd",
            "Spend of pipeline runs a validation gate stopped (the gate and its upstream steps)",
        )
        spent = spend_by_job((e.job_id, e.amount_usd) for e in ledger)
        waste.add_metric([], float(waste_usd(jobs, spent)))
        yield waste
        idle = CounterMetricFamily(
            "budgeteer_idle_usd",
            "Spend on pooled instances kept warm between jobs (billed to the job before)",
        )
        idle_usd = sum((e.amount_usd for e in ledger if is_idle(e)), Decimal(0))
        idle.add_metric([], float(idle_usd + sum((c.amount_usd for c in charges), Decimal(0))))
        yield idle
        signals = CounterMetricFamily(
            "budgeteer_signals",
            "Retraining signals by kind and what they caused (submit, upgrade, none)",
            labels=["kind", "action"],
        )
        counted = Counter((r.kind, r.action) for r in store.signals(limit=None))
        for (kind, action), n in sorted(counted.items()):
            signals.add_metric([kind, action], n)
        yield signals

        attempts_of: dict[str, list[Attempt]] = {}
        for a in attempts:
            attempts_of.setdefault(a.job_id, []).append(a)
        entries_of: dict[str, list[LedgerEntry]] = {}
        for e in ledger:
            entries_of.setdefault(e.job_id, []).append(e)
        saved = sum(
            (
                job_cost(attempts_of.get(j, []), entries, self.ctx.prices).savings_usd
                for j, entries in entries_of.items()
            ),
            Decimal(0),
        )
        savings = CounterMetricFamily(
            "budgeteer_savings_usd", "On-demand equivalent minus accrued spend"
        )
        savings.add_metric([], float(saved))
        yield savings

    def _budgets(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.ctx.snapshot()
        warm = GaugeMetricFamily(
            "budgeteer_pool_warm_instances",
            "Instances idling warm in each pooled offering's pool now",
            labels=["offering"],
        )
        for view in snapshot.pools:
            warm.add_metric([view.settings.name], view.idle)
        yield warm
        plan = self.ctx.plan(snapshot)
        names = ("limit", "accrued", "committed", "remaining")
        families = {
            n: GaugeMetricFamily(f"budgeteer_budget_{n}_usd", f"Budget {n}", labels=["budget"])
            for n in names
        }
        quarantined = GaugeMetricFamily(
            "budgeteer_jobs_quarantined",
            "Jobs left out of planning because planning them raised (hold reason invalid)",
        )
        quarantined.add_metric([], sum(h.reason is HoldReason.INVALID for h in plan.holds))
        yield quarantined
        for p in plan.budgets:
            values = {
                "limit": p.limit_usd,
                "accrued": p.accrued_usd,
                "committed": p.committed_usd,
                "remaining": p.limit_usd - p.accrued_usd - p.committed_usd,
            }
            for n in names:
                families[n].add_metric([p.budget_id], float(values[n]))
        yield from families.values()

    def _missed(self, job: Job) -> bool:
        assert job.deadline is not None
        if not job.state.is_terminal:
            return False
        end = self.ctx.store.events(job.id)[-1].at
        return job.state is not JobState.SUCCEEDED or end > job.deadline


def registry(ctx: ApiContext) -> tuple[CollectorRegistry, Histogram]:
    """A registry with the store collector and the cycle-duration histogram."""
    reg = CollectorRegistry()
    reg.register(StoreCollector(ctx))
    cycle = Histogram(
        "budgeteer_scheduler_cycle_seconds",
        "Duration of one scheduler cycle",
        registry=reg,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    )
    return reg, cycle
