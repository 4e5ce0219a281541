"""The spend book folds the ledger into a few records that give the core exactly the same budget
accrued amounts and the same fair-share usage as the raw ledger — incrementally, across period
boundaries and time zones."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from budgeteer.core import Policy
from budgeteer.core.admit import budget_tallies
from budgeteer.core.order import decayed_usage
from budgeteer.domain.budget import Budget, Period, PeriodKind, Scope, ScopeKind, SpendRecord
from budgeteer.ledger.spendbook import SpendBook
from builders import make_snapshot

T0 = datetime(2026, 9, 20, tzinfo=UTC)
TEAMS = ("growth", "search", "research")
BUDGETS = (
    Budget(
        "org-month-kolkata",
        Scope(ScopeKind.ORGANISATION, "acme"),
        Decimal(1000),
        Period(PeriodKind.MONTHLY, "Asia/Kolkata"),
    ),
    Budget(
        "growth-quarter-ny",
        Scope(ScopeKind.TEAM, "growth"),
        Decimal(500),
        Period(PeriodKind.QUARTERLY, "America/New_York"),
    ),
    Budget(
        "churn-10d",
        Scope(ScopeKind.PROJECT, "churn"),
        Decimal(50),
        Period(PeriodKind.CUSTOM, "Asia/Kathmandu", date(2026, 9, 1), 10),
    ),
    Budget(
        "search-month",
        Scope(ScopeKind.TEAM, "search"),
        Decimal(300),
        Period(PeriodKind.MONTHLY, "UTC"),
    ),
)
entry = st.tuples(
    st.sampled_from(TEAMS),
    st.sampled_from([None, "churn"]),
    st.decimals(min_value=Decimal("0.000001"), max_value=Decimal(50), places=6),
    st.integers(min_value=0, max_value=60 * 24 * 60),  # minutes after T0: two months
)


def _compare(raw: list[SpendRecord], book: SpendBook, now: datetime) -> None:
    compact = book.records()
    assert len(compact) <= len(raw) or not raw
    full = make_snapshot([], budgets=BUDGETS, spend=raw, now=now)
    folded = dataclasses.replace(full, spend=compact)
    exact = {k: t.accrued_usd for k, t in budget_tallies(full).items()}
    assert {k: t.accrued_usd for k, t in budget_tallies(folded).items()} == exact
    policy = Policy()
    want, got = decayed_usage(full, policy), decayed_usage(folded, policy)
    assert want.keys() == got.keys()
    for team, usd in want.items():
        assert abs(got[team] - usd) <= 1e-9 * max(1.0, usd)


@settings(max_examples=60, deadline=None)
@given(st.lists(entry, max_size=60), st.lists(entry, max_size=60))
def test_folding_is_exact_before_and_after_periods_roll_over(
    first: list[tuple[str, str | None, Decimal, int]],
    second: list[tuple[str, str | None, Decimal, int]],
) -> None:
    book = SpendBook(Policy().fair_share_half_life_seconds, T0)
    raw: list[SpendRecord] = []

    def add(items: list[tuple[str, str | None, Decimal, int]], upto: datetime) -> None:
        for team, project, amount, minutes in items:
            at = min(T0 + timedelta(minutes=minutes), upto)
            book.add(team, project, amount, at)
            raw.append(SpendRecord(team, amount, at, project))

    middle = T0 + timedelta(days=20)  # October 10th: some periods rolled since T0
    assert book.set_boundaries(BUDGETS, T0)
    add(first, middle)
    assert book.set_boundaries(BUDGETS, middle)
    _compare(raw, book, middle)
    end = T0 + timedelta(days=61)  # past the quarter's end too
    add(second, end)
    assert book.set_boundaries(BUDGETS, end)
    _compare(raw, book, end)


def test_a_budget_whose_period_began_earlier_asks_for_a_refill() -> None:
    book = SpendBook(Policy().fair_share_half_life_seconds, T0)
    book.set_boundaries(BUDGETS[3:], T0 + timedelta(days=15))
    book.add("growth", None, Decimal(1), T0 + timedelta(days=12))  # Oct 2nd
    book.add("growth", None, Decimal(1), T0 + timedelta(days=14))
    weekly = Budget(
        "week",
        Scope(ScopeKind.TEAM, "growth"),
        Decimal(9),
        Period(PeriodKind.CUSTOM, "UTC", date(2026, 10, 3), 7),
    )
    assert not book.set_boundaries((*BUDGETS[3:], weekly), T0 + timedelta(days=15))
    assert len(book.records()) == 1  # unchanged: the caller refills from the ledger
