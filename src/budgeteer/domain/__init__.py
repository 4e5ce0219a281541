"""Domain records: frozen, typed, documented. No I/O and no clock reads live here."""

from budgeteer.domain.budget import Budget, Period, PeriodKind, Scope, ScopeKind, SpendRecord
from budgeteer.domain.job import (
    DependencyCondition,
    Job,
    JobState,
    Resources,
    SpotSettings,
    Work,
)
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.domain.tier import Tier

__all__ = [
    "Budget",
    "DependencyCondition",
    "Job",
    "JobState",
    "Market",
    "Offering",
    "Period",
    "PeriodKind",
    "Price",
    "Resources",
    "Scope",
    "ScopeKind",
    "SpendRecord",
    "SpotSettings",
    "Tier",
    "Work",
]
