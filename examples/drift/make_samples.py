"""Writes the example samples (seeded): a reference month of churn features, a current sample
drawn from the same distribution, and one strongly shifted (longer tenure, more spend, a new
plan mix). Run: python examples/drift/make_samples.py"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
PLANS = ("basic", "plus", "pro")


def sample(seed: int, n: int, shift: float) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    tenure = rng.gamma(2.0, 6.0 + 10.0 * shift, n)
    spend = rng.lognormal(3.5 + 0.6 * shift, 0.4, n)
    mix = (0.5 - 0.3 * shift, 0.3, 0.2 + 0.3 * shift)
    plan = rng.choice(PLANS, n, p=mix)
    return [
        {"tenure_months": round(float(t), 2), "monthly_spend": round(float(s), 2), "plan": str(p)}
        for t, s, p in zip(tenure, spend, plan, strict=True)
    ]


def write(name: str, rows: list[dict[str, object]]) -> None:
    with (HERE / name).open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    write("reference.csv", sample(1, 2000, 0.0))
    write("current-stable.csv", sample(2, 1000, 0.0))
    write("current.csv", sample(3, 1000, 1.0))
