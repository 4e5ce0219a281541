"""Turn Pydantic validation errors into :class:`SpecErrors` that name each field."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from budgeteer.errors import SpecError, SpecErrors

_FRIENDLY = {
    "extra_forbidden": "unknown field",
    "missing": "field required",
}


def field_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """``("resources", "accelerators", 1)`` → ``resources.accelerators[1]``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-") or part in {"list", "dict", "str"}:
            continue  # Pydantic's union/validator branch labels, not user field names
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def spec_errors(exc: ValidationError, source: str | None = None, prefix: str = "") -> SpecErrors:
    """All problems of ``exc``, each naming its field (``prefix`` is prepended: ``jobs[3]``)."""
    errors = []
    for err in exc.errors(include_url=False):
        problem = _FRIENDLY.get(err["type"], err["msg"])
        if problem.startswith("Value error, "):
            problem = problem.removeprefix("Value error, ")
        errors.append(SpecError(field_path(err["loc"], prefix), problem, source))
    return SpecErrors(errors)
