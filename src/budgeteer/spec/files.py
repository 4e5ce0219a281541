"""Read job and budget files (YAML or JSON) with every problem named by file and field."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from budgeteer.domain.budget import Budget, SpendRecord
from budgeteer.domain.job import Job
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.spec.batch import jobs_from_specs
from budgeteer.spec.budget import BudgetSpec, SpendSpec, budget_from_spec, spend_from_spec
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.job import JobSpec
from budgeteer.textfile import TextFileProblem, read_text

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64  # lists and mappings in a document, one in another (a job spec needs about 6)
_T = TypeVar("_T")


class _Yaml12Loader(yaml.SafeLoader):
    """Safe YAML loading with YAML 1.2 booleans: only true/false are booleans.

    Plain PyYAML follows YAML 1.1, where ``on``/``off``/``yes``/``no`` are booleans, which would
    turn the job spec's ``depends_on: [{job: a, on: success}]`` key into ``True``.
    """


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    _Yaml12Loader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0,
        (
            "tag:yaml.org,2002:bool",
            re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        ),
    )


def parse_yaml(text: str) -> Any:
    """Parse YAML text safely with YAML 1.2 booleans."""
    return yaml.load(text, Loader=_Yaml12Loader)


def read_document(path: Path) -> Any:
    """Parse a YAML, JSON or TOML file (by suffix; YAML otherwise), with a size limit."""
    return _parsed(path, _text(path))


def _text(path: Path) -> str:
    try:
        return read_text(path, MAX_FILE_BYTES)
    except TextFileProblem as problem:
        raise SpecError("(file)", str(problem), str(path)) from None


def _parsed(path: Path, text: str) -> Any:
    """``text``, read from ``path``, parsed as its suffix says."""
    source = str(path)
    kind = path.suffix.lstrip(".") if path.suffix in (".json", ".toml") else "YAML"
    try:
        if path.suffix == ".json":
            doc = json.loads(text)
        elif path.suffix == ".toml":
            doc = tomllib.loads(text)
        else:
            doc = parse_yaml(text)
    except (yaml.YAMLError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError("(file)", f"not valid {kind}: {exc}", source) from None
    except RecursionError:
        raise SpecError("(file)", f"not valid {kind}: nested too deeply", source) from None
    if _deeper_than(doc, MAX_DEPTH):
        raise SpecError(
            "(file)", f"nested deeper than {MAX_DEPTH} levels (or a YAML alias in itself)", source
        )
    return doc


def _deeper_than(doc: Any, limit: int) -> bool:
    """Whether lists and mappings in ``doc`` nest deeper than ``limit`` (without recursion; a
    YAML alias's node, shared, is walked again only when reached deeper than before, and one
    that holds itself is as deep as the limit allows)."""
    deepest: dict[int, int] = {}  # id of a list or mapping in ``doc`` → the deepest it was met
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > limit:
            return True
        if deepest.get(id(node), 0) >= depth:
            continue
        deepest[id(node)] = depth
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return False


def _items(doc: Any, key: str, source: str) -> list[Any]:
    if isinstance(doc, dict) and set(doc) <= {key}:
        doc = doc.get(key, [])
    if not isinstance(doc, list):
        raise SpecError(key, f"expected a list of {key} (or a mapping with a '{key}' list)", source)
    return doc


@dataclass(frozen=True, slots=True)
class JobSpecsFile:
    """A jobs file read: its valid specs with their positions in the file, the names of the
    invalid ones (not "unknown" to their dependents) and what was wrong with them."""

    source: str
    specs: tuple[JobSpec, ...]
    positions: tuple[int, ...]
    invalid_names: Mapping[str, str]
    errors: tuple[SpecError, ...]
    #: SHA-256 of the bytes read (``submit``'s idempotency key: the same content, once)
    digest: str = ""


def read_job_specs(path: Path) -> JobSpecsFile:
    """The specs of a file holding a list of job specs (or ``{jobs: [...]}``), each validated;
    the file itself unreadable or malformed raises. The file is read once (a pipe too)."""
    source = str(path)
    text = _text(path)
    items = _items(_parsed(path, text), "jobs", source)
    specs: list[JobSpec] = []
    positions: list[int] = []
    errors: list[SpecError] = []
    invalid_names: dict[str, str] = {}
    for i, item in enumerate(items):
        try:
            specs.append(JobSpec.parse(item, source, prefix=f"jobs[{i}]"))
            positions.append(i)
        except SpecErrors as exc:
            errors.extend(exc.errors)
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                invalid_names[item["name"]] = item["name"]
    digest = hashlib.sha256(text.encode()).hexdigest()  # valid UTF-8: the very bytes read
    return JobSpecsFile(
        source, tuple(specs), tuple(positions), invalid_names, tuple(errors), digest
    )


def converted(read: JobSpecsFile, convert: Callable[[], _T]) -> _T:
    """``convert()`` the specs of ``read``, reporting its reading errors and the conversion's
    together, in file order (nothing is returned when there is any)."""
    errors = list(read.errors)
    result: _T | None = None
    try:
        result = convert()
    except SpecErrors as exc:
        errors.extend(exc.errors)
    except SpecError as exc:
        errors.append(exc)
    if errors or result is None:
        raise SpecErrors(sorted(errors, key=lambda e: _index_of(e.field)))
    return result


def load_jobs_file(
    path: Path, *, now: datetime, known_accelerators: Sequence[str], first_seq: int = 0
) -> list[Job]:
    """Jobs from a file holding a list of job specs (or ``{jobs: [...]}``), submitted at
    ``now`` (for planning; the service submits through :mod:`budgeteer.intake`)."""
    read = read_job_specs(path)
    return converted(
        read,
        lambda: jobs_from_specs(
            read.specs,
            now=now,
            known_accelerators=known_accelerators,
            existing=read.invalid_names,
            first_seq=first_seq,
            source=read.source,
            positions=read.positions,
        ),
    )


def _index_of(field: str) -> int:
    """The job index of an error path like ``jobs[3].name`` (for reporting in file order)."""
    match = re.match(r"jobs\[(\d+)\]", field)
    return int(match.group(1)) if match else -1


def load_budgets_file(path: Path) -> tuple[list[Budget], list[SpendRecord]]:
    """Budgets and already-accrued spend from ``{budgets: [...], spend: [...]}``."""
    source = str(path)
    doc = read_document(path)
    if not isinstance(doc, dict) or not set(doc) <= {"budgets", "spend"}:
        raise SpecError("(root)", "expected a mapping with 'budgets' and optional 'spend'", source)
    raw_budgets = doc.get("budgets") or []
    raw_spend = doc.get("spend") or []
    errors: list[SpecError] = []
    budgets: list[Budget] = []
    spend: list[SpendRecord] = []
    if not isinstance(raw_budgets, list):
        raise SpecError("budgets", "expected a list", source)
    if not isinstance(raw_spend, list):
        raise SpecError("spend", "expected a list", source)
    seen: set[str] = set()
    for i, item in enumerate(raw_budgets):
        try:
            budget = budget_from_spec(BudgetSpec.parse(item, source, prefix=f"budgets[{i}]"))
        except SpecErrors as exc:
            errors.extend(exc.errors)
            continue
        if budget.id in seen:
            errors.append(
                SpecError(f"budgets[{i}].id", f"duplicate budget id {budget.id!r}", source)
            )
        seen.add(budget.id)
        budgets.append(budget)
    for i, item in enumerate(raw_spend):
        try:
            spend.append(spend_from_spec(_parse_spend(item, source, i)))
        except SpecErrors as exc:
            errors.extend(exc.errors)
    if errors:
        raise SpecErrors(errors)
    return budgets, spend


def _parse_spend(item: Any, source: str, index: int) -> SpendSpec:
    try:
        return SpendSpec.model_validate(item)
    except ValidationError as exc:
        raise spec_errors(exc, source, prefix=f"spend[{index}]") from None
