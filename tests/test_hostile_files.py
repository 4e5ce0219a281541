"""Every leaf of the example files, replaced by a hostile value: reading the file (and, where
cheap, building from it) either works or raises a :class:`BudgeteerError` naming what is
wrong — never another exception. This is how the tracebacks fixed in session 36 were found
(non-UTF-8 bytes, infinities, NUL bytes in paths, negative seeds, store URLs, time zones);
it keeps them fixed."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from budgeteer.catalog import load_catalog
from budgeteer.config import load_config
from budgeteer.errors import BudgeteerError
from budgeteer.service.wiring import build
from budgeteer.sim.scenario import build as build_scenario
from budgeteer.sim.scenario import load_scenario
from budgeteer.spec.files import load_budgets_file, load_jobs_file
from budgeteer.triggers.policy import load_policy

ROOT = Path(__file__).parents[1]
HOSTILE: tuple[object, ...] = (-1, "x", [], {}, None, float("inf"), "\x00", "a" * 300, 10**30)
NOW = datetime(2026, 12, 8, tzinfo=UTC)
ACCELERATORS = list(load_catalog().throughput)


def _leaves(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _leaves(value, (*path, i))
    if path:
        yield path


def _mutants(doc: Any) -> Iterator[tuple[str, Any]]:
    for path in _leaves(doc):
        for value in HOSTILE:
            mutant = copy.deepcopy(doc)
            node = mutant
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
            yield f"{'.'.join(map(str, path))}={value!r:.20}", mutant


def _absolute(doc: Any, folder: Path) -> Any:
    """Relative file paths (``../tests/data/…``) made absolute, so the mutant can live
    anywhere."""
    if isinstance(doc, dict):
        return {k: _absolute(v, folder) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_absolute(v, folder) for v in doc]
    if isinstance(doc, str) and doc.startswith("../"):
        return str((folder / doc).resolve())
    return doc


def _sandbox(path: Path) -> None:
    config, root = load_config(path)
    service = build(config, root)
    try:
        service.scheduler()
    finally:
        service.store.close()


def _scenario(path: Path) -> None:
    scenario = load_scenario(path)
    build_scenario(scenario.model_copy(update={"days": min(scenario.days, 0.25)}))


def _jobs(path: Path) -> None:
    load_jobs_file(path, now=NOW, known_accelerators=ACCELERATORS)


def _budgets(path: Path) -> None:
    load_budgets_file(path)


def _configs(path: Path) -> None:
    load_config(path)


def _policy(path: Path) -> None:
    load_policy(path)


CASES: list[tuple[str, Callable[[Path], None]]] = [
    ("examples/sandbox.yaml", _sandbox),
    ("examples/ec2.yaml", _configs),
    ("examples/slurm.yaml", _configs),
    ("examples/ray.yaml", _configs),
    ("examples/kubernetes.yaml", _configs),
    ("scenarios/short-burst.yaml", _scenario),
    ("src/budgeteer/examples/jobs.yaml", _jobs),
    ("src/budgeteer/examples/budgets.yaml", _budgets),
    ("examples/drift/policy.yaml", _policy),
]


@pytest.mark.parametrize(("name", "read"), CASES, ids=[name for name, _ in CASES])
def test_hostile_leaves_are_named_errors(
    tmp_path: Path, name: str, read: Callable[[Path], None]
) -> None:
    source = ROOT / name
    doc = _absolute(yaml.safe_load(source.read_text()), source.parent)
    if isinstance(doc, dict) and isinstance(doc.get("jobs"), list):
        doc["jobs"] = doc["jobs"][:4]  # four jobs hold the schema's fields; the rest repeats
    target = tmp_path / source.name
    crashes = []
    count = 0
    for label, mutant in _mutants(doc):
        target.write_text(yaml.safe_dump(mutant))
        count += 1
        try:
            read(target)
        except BudgeteerError:
            pass
        except Exception as exc:  # what this test exists to find
            crashes.append(f"{label}: {type(exc).__name__}: {exc}"[:200])
    assert count > 50  # the file had leaves to replace
    assert crashes == []
