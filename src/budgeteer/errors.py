"""The one exception hierarchy of budgeteer.

Every error raised on purpose derives from :class:`BudgeteerError`. Subclasses carry structured
fields (the offending field, file, row, column) so that the CLI and the API can name the problem
precisely. Outcomes that are part of normal scheduling (a job held for budget, an infeasible
deadline) are *data* in the plan, never exceptions.
"""

from __future__ import annotations


class BudgeteerError(Exception):
    """Root of every error budgeteer raises deliberately."""

    #: Whether retrying the same operation later may succeed (adapters set this).
    transient: bool = False


class SpecError(BudgeteerError):
    """A job, budget or policy specification is invalid.

    ``field`` is a dotted path to the offending field (``resources.accelerators[1]``), ``problem``
    says what is wrong with it in words, and ``source`` optionally names the file or request.
    """

    def __init__(self, field: str, problem: str, source: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {problem}")


class SpecErrors(BudgeteerError):
    """Several specification errors found at once (all of them, not just the first)."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(e) for e in errors))


class CycleError(SpecError):
    """The dependency graph of the submitted jobs contains a cycle; ``cycle`` lists it in order."""

    def __init__(self, cycle: list[str], source: str | None = None) -> None:
        self.cycle = tuple(cycle)
        super().__init__("depends_on", "dependency cycle: " + " -> ".join(cycle), source)


class CatalogError(BudgeteerError):
    """A catalog file (offerings, throughput or egress table) is malformed.

    Names the ``file``, the 1-based data ``row`` (header is row 1, so the first data row is 2) and
    the ``column`` where the problem is.
    """

    def __init__(self, file: str, row: int | None, column: str | None, problem: str) -> None:
        self.file = file
        self.row = row
        self.column = column
        self.problem = problem
        parts = [file]
        if row is not None:
            parts.append(f"row {row}")
        if column is not None:
            parts.append(f"column {column!r}")
        super().__init__(", ".join(parts) + f": {problem}")
