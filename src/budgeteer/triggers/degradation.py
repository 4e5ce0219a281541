"""A model metric degrading against its baseline, detected sequentially (pure): the
Page-Hinkley test, step for step as river's ``river.drift.PageHinkley`` computes it (the
``drift`` extra installs river; this one needs nothing and is tested against it on the same
streams).

Each value updates the running mean; the cumulative deviations ``Σ (x − mean − δ)`` (for a rise)
and ``Σ (x − mean + δ)`` (for a fall), each faded by ``alpha``, are compared with their extremes
so far; once ``min_instances`` values are in, a gap above ``threshold`` is a detection. After a
detection the next value starts afresh. ``mode`` ``down`` watches falls only (an AUC that
drops), ``up`` rises only (a loss that climbs), ``both`` either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

Mode = Literal["up", "down", "both"]


@dataclass(frozen=True, slots=True)
class PageHinkley:
    """The detector's state; :meth:`update` returns the next one."""

    min_instances: int = 30
    delta: float = 0.005
    threshold: float = 50.0
    alpha: float = 1 - 0.0001
    mode: Mode = "both"
    n: int = 0
    mean: float = 0.0
    sum_increase: float = 0.0
    sum_decrease: float = 0.0
    min_increase: float = float("inf")
    max_decrease: float = -1.0
    drift: bool = False

    def fresh(self) -> PageHinkley:
        """The same detector with nothing seen."""
        return PageHinkley(self.min_instances, self.delta, self.threshold, self.alpha, self.mode)

    def update(self, x: float) -> PageHinkley:
        """The state after ``x`` (``drift`` says whether it is detected now)."""
        s = self.fresh() if self.drift else self
        n = s.n + 1
        mean = s.mean + (x - s.mean) / n
        dev = x - mean
        inc = s.alpha * s.sum_increase + dev - s.delta
        dec = s.alpha * s.sum_decrease + dev + s.delta
        min_inc = min(s.min_increase, inc)
        max_dec = max(s.max_decrease, dec)
        drift = False
        if n >= s.min_instances:
            up, down = inc - min_inc > s.threshold, max_dec - dec > s.threshold
            drift = {"up": up, "down": down, "both": up or down}[s.mode]
        return replace(
            s,
            n=n,
            mean=mean,
            sum_increase=inc,
            sum_decrease=dec,
            min_increase=min_inc,
            max_decrease=max_dec,
            drift=drift,
        )


def detections(values: Iterable[float], detector: PageHinkley | None = None) -> list[int]:
    """The indices of ``values`` at which the detector fires."""
    state = detector or PageHinkley()
    out = []
    for i, x in enumerate(values):
        state = state.update(float(x))
        if state.drift:
            out.append(i)
    return out
