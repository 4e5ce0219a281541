"""Reading a sample (CSV, or Parquet with the ``drift`` extra's pyarrow) into columns."""

from __future__ import annotations

import csv
from pathlib import Path

from budgeteer.errors import SpecError

#: The largest file read (bytes): a sample, not a warehouse.
MAX_BYTES = 512 * 1024 * 1024


def read_table(path: Path, option: str) -> dict[str, list[object]]:
    """The columns of ``path`` (by suffix: ``.parquet``/``.pq``, else CSV with a header row).
    Raises :class:`SpecError` naming ``option`` (the file's place on the command line)."""
    if not path.is_file():
        raise SpecError(option, f"no such file: {path}")
    if path.stat().st_size > MAX_BYTES:
        raise SpecError(option, f"larger than {MAX_BYTES // 2**20} MiB: take a sample")
    if path.suffix.lower() in {".parquet", ".pq"}:
        return _parquet(path, option)
    try:
        return _csv(path, option)
    except csv.Error as exc:  # a field over the csv module's limit, an unclosed quote …
        raise SpecError(option, f"not valid CSV: {exc}") from None


def _csv(path: Path, option: str) -> dict[str, list[object]]:
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise SpecError(option, "empty: expected a header row")
        names = [h.strip() for h in header]
        if len(set(names)) != len(names) or "" in names:
            raise SpecError(option, "the header has an empty or repeated column name")
        columns: dict[str, list[object]] = {n: [] for n in names}
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(names):
                raise SpecError(
                    f"{option}:{line}", f"{len(row)} fields; the header has {len(names)}"
                )
            for name, value in zip(names, row, strict=True):
                columns[name].append(value)
    if not next(iter(columns.values())):
        raise SpecError(option, "no rows after the header")
    return columns


def _parquet(path: Path, option: str) -> dict[str, list[object]]:
    try:
        import pyarrow.parquet as pq  # noqa: PLC0415 - the drift extra
    except ImportError:
        raise SpecError(
            option, "reading Parquet needs pyarrow: pip install 'budgeteer[drift]'"
        ) from None
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow's errors for a file that is not Parquet
        raise SpecError(option, f"not a readable Parquet file: {exc}") from None
    if table.num_rows == 0:
        raise SpecError(option, "no rows")
    return {name: table.column(name).to_pylist() for name in table.column_names}
