"""Booting ahead of a known burst (pools' ``warm`` windows), measured on the short-burst
scenario: the scenario as bundled against the same with a warm window of N instances on the
offering the nightly burst runs on (``aws/us-east-1/use1-az2/g4dn.xlarge/spot``, from 01:00 for
20 minutes, paid by ``growth``), under ``default``. Prints cost (idle and pool charges
included), start-ups the jobs paid, idle hours, pool boots, and how long the burst's jobs
(submitted 01:00–01:23) waited from submission to running. Nothing is asserted; the simulation
is deterministic (about 10 s per run).

    python benchmarks/pool_warm.py --instances 2,4,8
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml

from budgeteer.domain.job import JobState
from budgeteer.sim import metrics
from budgeteer.sim.scenario import build
from budgeteer.sim.schema import Scenario, load_scenario

ROOT = Path(__file__).resolve().parent.parent
BURST_OFFERING = "aws/us-east-1/use1-az2/g4dn.xlarge/spot"


def _scenario(instances: int, folder: Path) -> Scenario:
    """short-burst, with the window when ``instances`` > 0 (written to ``folder``: its paths
    made absolute, then read as any scenario)."""
    path = ROOT / "scenarios" / "short-burst.yaml"
    if not instances:
        return load_scenario(path)
    doc = yaml.safe_load(path.read_text())
    first = dict(doc["pools"][0], offerings=BURST_OFFERING, team="growth")
    first["warm"] = [{"at": "0 1 * * *", "instances": instances, "for": "20m"}]
    doc["pools"] = [first, *doc["pools"]]
    market = doc["market"]
    market["trace"] = str((path.parent / market["trace"]).resolve())
    for zone in market.get("zones", []):
        zone["trace"] = str((path.parent / zone["trace"]).resolve())
        zone["prices"]["file"] = str((path.parent / zone["prices"]["file"]).resolve())
    variant = folder / f"short-burst-warm{instances}.yaml"
    variant.write_text(yaml.safe_dump(doc))
    return load_scenario(variant)


def _row(instances: int, folder: Path) -> list[str]:
    built = build(_scenario(instances, folder))
    run = built.run("default")
    s = metrics.summary(run, built)
    waits = []
    for job in run.store.jobs():
        at = job.submitted_at
        if not (at.hour == 1 and at.minute <= 23 and job.tier.name == "P2"):
            continue
        running = next(
            (e.at for e in run.store.events(job.id) if e.to_state is JobState.RUNNING), None
        )
        if running is not None:
            waits.append((running - at).total_seconds() / 60)
    waits.sort()
    sla = "/".join(f"{v:.3g}" if v is not None else "-" for v in s["sla_met_fraction"].values())
    return [
        str(instances) if instances else "none",
        f"{s['cost_usd']:.2f}",
        sla,
        str(s["startups"]),
        f"{s['startup_hours']:.3f}",
        str(s["pool_boots"]),
        f"{s['idle_hours']:.3f}",
        f"{s['idle_usd']:.2f}",
        f"{len(waits)}",
        f"{waits[len(waits) // 2]:.1f}",
        f"{statistics.mean(waits):.1f}",
    ]


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", default="2,4,8", help="window sizes, comma-separated")
    args = parser.parse_args()
    sizes = [0, *(int(n) for n in args.instances.split(","))]
    head = [
        "warm window", "cost $", "SLA P0/P1/P2/P3", "start-ups", "start-up h", "pool boots",
        "idle h", "idle $", "burst jobs", "wait p50 min", "wait mean min",
    ]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            print("| " + " | ".join(_row(n, Path(folder))) + " |", flush=True)


if __name__ == "__main__":
    main()
