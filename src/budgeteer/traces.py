"""Load spot availability traces and spot price series from JSON, validated.

Trace files (the "Can't Be Late" format): ``{"metadata": {"gap_seconds": N}, "data": [...],
"prices": [...]?}`` with ``data[i] ≥ 1`` meaning a spot instance is available at tick ``i``.
Price files: ``v100_spot_prices.json`` (``{"<zone>_v100_1": [...]}``, pick one with a key) or
``v100_1node_prices/<zone>.json`` (``{"prices": [...], "gap_seconds": N, "price_info": {...}}``).
Every problem is reported with the file and the field; nothing is half-loaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from budgeteer.domain.trace import SpotTrace
from budgeteer.errors import BudgeteerError
from budgeteer.textfile import TextFileProblem, read_text

MAX_TRACE_BYTES = 64 * 1024 * 1024


class TraceError(BudgeteerError):
    """A trace or price file is malformed; names the ``file`` and the ``field``."""

    def __init__(self, file: str, field: str, problem: str) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        super().__init__(f"{file}: {field}: {problem}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(read_text(path, MAX_TRACE_BYTES))
    except TextFileProblem as problem:
        raise TraceError(str(path), "(file)", str(problem)) from None
    except json.JSONDecodeError as exc:
        raise TraceError(str(path), "(file)", f"not valid JSON: {exc}") from None
    except RecursionError:
        raise TraceError(str(path), "(file)", "not valid JSON: nested too deeply") from None


def _numbers(path: Path, field: str, values: Any, *, integers: bool) -> list[float]:
    if not isinstance(values, list) or not values:
        raise TraceError(str(path), field, "must be a non-empty list of numbers")
    out: list[float] = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TraceError(str(path), f"{field}[{i}]", f"must be a number, got {v!r}")
        if not math.isfinite(v) or v < 0:
            raise TraceError(str(path), f"{field}[{i}]", f"must be finite and ≥ 0, got {v!r}")
        if integers and v != int(v):
            raise TraceError(str(path), f"{field}[{i}]", f"must be a whole count, got {v!r}")
        out.append(float(v))
    return out


def load_trace(path: Path) -> SpotTrace:
    """A :class:`SpotTrace` from a trace file; raises :class:`TraceError` on any problem."""
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise TraceError(str(path), "(root)", "must be an object with 'metadata' and 'data'")
    unknown = set(doc) - {"metadata", "data", "prices"}
    if unknown:
        raise TraceError(str(path), sorted(unknown)[0], "unknown key")
    for key in ("metadata", "data"):
        if key not in doc:
            raise TraceError(str(path), key, "missing")
    meta = doc["metadata"]
    if not isinstance(meta, dict) or "gap_seconds" not in meta:
        raise TraceError(str(path), "metadata.gap_seconds", "missing")
    gap = meta["gap_seconds"]
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not gap > 0 or gap != int(gap):
        raise TraceError(
            str(path), "metadata.gap_seconds", f"must be a positive whole number, got {gap!r}"
        )
    data = _numbers(path, "data", doc["data"], integers=True)
    prices = None
    if "prices" in doc:
        prices = tuple(_numbers(path, "prices", doc["prices"], integers=False))
        if len(prices) != len(data):
            raise TraceError(
                str(path), "prices", f"has {len(prices)} values but data has {len(data)}"
            )
    return SpotTrace(
        name=path.stem, gap_seconds=int(gap), available=tuple(int(v) for v in data), prices=prices
    )


def load_price_series(path: Path, key: str | None = None) -> tuple[tuple[float, ...], int | None]:
    """A spot price series (USD/hour per tick) and its ``gap_seconds`` when the file gives one.

    For a file keyed by zone (``{"us-east-1f_v100_1": [...]}``) pass ``key``.
    """
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise TraceError(str(path), "(root)", "must be an object")
    if "prices" in doc:
        gap = doc.get("gap_seconds")
        if gap is not None and (isinstance(gap, bool) or not isinstance(gap, int) or gap <= 0):
            raise TraceError(str(path), "gap_seconds", f"must be a positive integer, got {gap!r}")
        return tuple(_numbers(path, "prices", doc["prices"], integers=False)), gap
    if key is None:
        raise TraceError(
            str(path),
            "(key)",
            "this file holds several series; give a key: " + ", ".join(sorted(doc)),
        )
    if key not in doc:
        raise TraceError(str(path), key, "no such series; available: " + ", ".join(sorted(doc)))
    return tuple(_numbers(path, key, doc[key], integers=False)), None
