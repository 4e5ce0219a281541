"""Drift and skew statistics between a reference sample and a current one, per feature (pure:
numpy and scipy).

Numeric features:

- **PSI** (population stability index) over the reference's quantile bins (``bins`` = 10 by
  default, duplicate edges merged; the outer bins open-ended so every current value lands in
  one): ``Σ (c − r) · ln(c / r)`` over the bins' shares, each share floored at
  :data:`EPSILON` so an empty bin does not make it infinite. Rule of thumb: < 0.1 stable,
  0.1–0.25 a moderate shift, > 0.25 a major one.
- **KS**: the two-sample Kolmogorov–Smirnov statistic (``scipy.stats.ks_2samp``: the largest
  gap between the two empirical CDFs, 0–1) and its p-value.
- **JS**: the Jensen–Shannon distance (base 2, 0–1) between the two histograms over the same
  bins (``scipy.spatial.distance.jensenshannon``).

Categorical features (non-numeric columns): PSI and JS over the categories' frequencies (the
union of both samples' categories); KS does not apply (``None``).

Skew (training against serving) is the same comparison with the training set as the reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp

from budgeteer.errors import SpecError

#: The smallest share a bin counts with in PSI (an empty bin would make it infinite).
EPSILON = 1e-4
#: Fewest values (after dropping missing ones) a sample needs per feature.
MIN_ROWS = 20
DEFAULT_BINS = 10

Column = NDArray[np.float64] | NDArray[np.object_]


@dataclass(frozen=True, slots=True)
class FeatureDrift:
    """One feature's statistics (``ks``/``ks_pvalue`` ``None`` for a categorical feature)."""

    feature: str
    kind: str  # "numeric" | "categorical"
    psi: float
    ks: float | None
    ks_pvalue: float | None
    js: float
    n_reference: int
    n_current: int


def psi_from_shares(reference: NDArray[np.float64], current: NDArray[np.float64]) -> float:
    """PSI of two share vectors over the same bins."""
    r = np.maximum(reference, EPSILON)
    c = np.maximum(current, EPSILON)
    return float(np.sum((c - r) * np.log(c / r)))


def quantile_edges(reference: NDArray[np.float64], bins: int = DEFAULT_BINS) -> NDArray[np.float64]:
    """Inner bin edges at the reference's quantiles (duplicates merged)."""
    inner = np.quantile(reference, np.linspace(0, 1, bins + 1)[1:-1])
    edges: NDArray[np.float64] = np.unique(inner)
    return edges


def shares(values: NDArray[np.float64], edges: NDArray[np.float64]) -> NDArray[np.float64]:
    """Each bin's share of ``values`` (bins split at ``edges``, open-ended outside)."""
    idx = np.searchsorted(edges, values, side="right")
    counts = np.bincount(idx, minlength=len(edges) + 1).astype(np.float64)
    out: NDArray[np.float64] = counts / counts.sum()
    return out


def numeric_drift(
    feature: str, reference: NDArray[np.float64], current: NDArray[np.float64], bins: int
) -> FeatureDrift:
    """The statistics of one numeric feature."""
    edges = quantile_edges(reference, bins)
    r, c = shares(reference, edges), shares(current, edges)
    test = ks_2samp(reference, current)
    return FeatureDrift(
        feature,
        "numeric",
        psi_from_shares(r, c),
        float(test.statistic),
        float(test.pvalue),
        float(jensenshannon(r, c, base=2)),
        len(reference),
        len(current),
    )


def categorical_drift(
    feature: str, reference: Sequence[str], current: Sequence[str]
) -> FeatureDrift:
    """The statistics of one categorical feature (category frequencies)."""
    cats = sorted(set(reference) | set(current))
    index = {c: i for i, c in enumerate(cats)}
    r = np.bincount([index[v] for v in reference], minlength=len(cats)).astype(np.float64)
    c = np.bincount([index[v] for v in current], minlength=len(cats)).astype(np.float64)
    r, c = r / r.sum(), c / c.sum()
    return FeatureDrift(
        feature,
        "categorical",
        psi_from_shares(r, c),
        None,
        None,
        float(jensenshannon(r, c, base=2)),
        len(reference),
        len(current),
    )


def compare(
    reference: Mapping[str, Sequence[object]],
    current: Mapping[str, Sequence[object]],
    bins: int = DEFAULT_BINS,
) -> list[FeatureDrift]:
    """Every feature's statistics. The two tables must have the same columns; missing values
    (empty, NaN) are dropped per feature; a feature needs :data:`MIN_ROWS` values on each side.
    A column is numeric when every present value of both sides parses as a finite number.
    Raises :class:`SpecError` naming the column and the problem."""
    if not reference:
        raise SpecError("reference", "no columns")
    only_ref = sorted(set(reference) - set(current))
    only_cur = sorted(set(current) - set(reference))
    if only_ref or only_cur:
        which = only_ref[0] if only_ref else only_cur[0]
        side = "current" if only_ref else "reference"
        raise SpecError(f"columns.{which}", f"not in the {side} file: both need the same columns")
    out = []
    for feature in sorted(reference):
        ref = _present(reference[feature])
        cur = _present(current[feature])
        for side, values in (("reference", ref), ("current", cur)):
            if len(values) < MIN_ROWS:
                raise SpecError(
                    f"{side}.{feature}",
                    f"{len(values)} value(s) after dropping missing ones; at least {MIN_ROWS}",
                )
        numbers = _numbers(ref), _numbers(cur)
        if numbers[0] is not None and numbers[1] is not None:
            out.append(numeric_drift(feature, numbers[0], numbers[1], bins))
        else:
            out.append(categorical_drift(feature, [str(v) for v in ref], [str(v) for v in cur]))
    return out


def _present(values: Sequence[object]) -> list[object]:
    out = []
    for v in values:
        if v is None or (isinstance(v, str) and v.strip() == ""):
            continue
        if isinstance(v, float) and math.isnan(v):
            continue
        if isinstance(v, str) and v.strip().lower() in {"nan", "null", "na"}:
            continue
        out.append(v)
    return out


def _numbers(values: list[object]) -> NDArray[np.float64] | None:
    try:
        arr = np.array([float(str(v)) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return arr if bool(np.all(np.isfinite(arr))) else None
