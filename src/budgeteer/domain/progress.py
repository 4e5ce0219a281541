"""A progress record as the training SDK sends it (``step``, ``total_steps``, ``loss``,
``epoch`` …), parsed and validated once, here, for every reader: the scheduler's runtime
control, the API's job view, the webhooks' deadline risk and the planner's work left.

A record is JSON from a job (through the API or the progress file in its checkpoint folder):
anything may be missing or of the wrong type. Fields that are not usable are ``None``; a
record is a step report only when ``step`` is a whole number ≥ 0 and ``total_steps`` one > 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """The usable fields of one progress report."""

    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    epoch: int | None = None
    #: when the store recorded the report (``None``: read from a progress file)
    at: datetime | None = None
    #: the record's other finite numbers by name (``auc``, ``val_loss`` …: what gates read)
    metrics: tuple[tuple[str, float], ...] = ()

    @property
    def fraction(self) -> float | None:
        """Share of the work done (0–1), when the record has a step and a total."""
        if self.step is None or self.total_steps is None:
            return None
        return min(self.step / self.total_steps, 1.0)


def parse_progress(record: object) -> ProgressRecord:
    """The usable fields of ``record`` (a decoded JSON value; anything else gives an empty
    record)."""
    if not isinstance(record, Mapping):
        return ProgressRecord()
    step = _whole(record.get("step"), minimum=0)
    total = _whole(record.get("total_steps"), minimum=1)
    if step is None or total is None:
        step = total = None
    loss = record.get("loss")
    usable_loss = (
        float(loss)
        if isinstance(loss, int | float) and not isinstance(loss, bool) and math.isfinite(loss)
        else None
    )
    metrics = tuple(
        (str(k)[:64], float(v))
        for k, v in list(record.items())[:MAX_METRICS]
        if isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and k not in _KNOWN
    )
    epoch = _whole(record.get("epoch"), minimum=0)
    return ProgressRecord(step, total, usable_loss, epoch, metrics=metrics)


#: The fields read by name; every other finite number is a metric.
_KNOWN = frozenset({"step", "total_steps", "epoch", "at"})
#: At most this many fields of a record are looked at for metrics.
MAX_METRICS = 64


def parse_progress_line(line: str) -> ProgressRecord | None:
    """One line of a progress file (JSON), or ``None`` when it is not JSON."""
    try:
        return parse_progress(json.loads(line))
    except (json.JSONDecodeError, RecursionError):
        return None


def _whole(value: object, *, minimum: int) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= minimum else None
