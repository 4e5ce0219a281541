"""What a signal's answer looks like (``budgeteer trigger --json`` and ``POST /v1/signals``):
one shape, written once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from budgeteer.triggers.drift import FeatureDrift
from budgeteer.triggers.policy import Decision


def finite(x: float | None) -> float | None:
    """``x`` rounded to 6 places, or ``None`` for nothing or a non-finite number."""
    return None if x is None or not math.isfinite(x) else round(x, 6)


def outcome_view(
    model: str,
    drift: Sequence[FeatureDrift],
    severity: str,
    decision: Decision,
    job_id: str | None,
) -> dict[str, Any]:
    """``{"model", "signals": [...], "severity", "decision": {...}}`` (the issue's contract)."""
    return {
        "model": model,
        "signals": [
            {
                "feature": d.feature,
                "kind": d.kind,
                "psi": finite(d.psi),
                "ks": finite(d.ks),
                "ks_pvalue": d.ks_pvalue,
                "js": finite(d.js),
                "n_reference": d.n_reference,
                "n_current": d.n_current,
            }
            for d in drift
        ],
        "severity": severity,
        "decision": {
            "action": decision.action,
            "job_id": job_id,
            "priority": decision.priority,
            "variant": decision.variant,
            "deadline": decision.deadline.isoformat() if decision.deadline else None,
            "replaces": decision.replaces,
            "reason": decision.reason,
        },
    }
