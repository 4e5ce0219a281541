"""The pure decision core: ``plan_cycle(snapshot, policy) -> Plan``."""

from budgeteer.core.candidates import FrontCache
from budgeteer.core.cycle import plan_cycle
from budgeteer.core.outcomes import (
    Admission,
    BudgetBlock,
    BudgetProjection,
    DependencyFailure,
    Expiry,
    Hold,
    HoldReason,
    Placement,
    Plan,
    SolverReport,
    Variant,
    WakeOn,
)
from budgeteer.core.policy import Policy, SolverChoice
from budgeteer.core.snapshot import Allocation, Snapshot

__all__ = [
    "Admission",
    "Allocation",
    "BudgetBlock",
    "BudgetProjection",
    "DependencyFailure",
    "Expiry",
    "FrontCache",
    "Hold",
    "HoldReason",
    "Placement",
    "Plan",
    "Policy",
    "Snapshot",
    "SolverChoice",
    "SolverReport",
    "Variant",
    "WakeOn",
    "plan_cycle",
]
