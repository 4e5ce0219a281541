"""Load and validate a catalog directory into offerings (read-only lookups afterwards).

A catalog is a folder with ``vms.csv`` (instances and their on-demand/spot prices),
``gpu_throughput.csv`` (relative training throughput, A100-40GB = 1.0) and ``egress.csv``.
The bundled one is a copy of ``shared/data/catalog`` (see ``data/PROVENANCE.md``). A user's
catalog may be a whole folder or just a ``vms.csv``; missing tables come from the bundled one.
Every malformed value is reported with its file, row and column; nothing is half-loaded.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TypeVar

from budgeteer.domain.egress import EgressRate, EgressTable
from budgeteer.domain.offering import Market, Offering, Price
from budgeteer.errors import CatalogError
from budgeteer.textfile import TextFileProblem, read_text

VMS_COLUMNS = (
    "provider",
    "region",
    "zones",
    "instance_type",
    "accelerator",
    "accelerator_count",
    "vcpus",
    "memory_gib",
    "gpu_memory_gib",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
    "price_basis",
)
THROUGHPUT_COLUMNS = ("accelerator", "relative_training_throughput")
EGRESS_COLUMNS = ("provider", "scope", "tier_start_gb", "tier_end_gb", "usd_per_gb")
EGRESS_SCOPES = frozenset({"internet", "inter_region", "intra_region"})
PRICE_BASES = frozenset({"instance", "host_plus_gpu", "gpu_only"})
MAX_CATALOG_BYTES = 64 * 1024 * 1024  # a catalog file's size at the most (the bundled: 63 kB)

#: Nominal memory per GPU (GiB) for rows whose catalog leaves it blank (Azure lists only names).
NOMINAL_GPU_MEMORY_GIB: dict[str, float] = {
    "T4": 16,
    "L4": 24,
    "A10G": 24,
    "A10": 24,
    "V100": 16,
    "V100-32GB": 32,
    "A100": 40,
    "A100-80GB": 80,
    "L40S": 48,
    "H100": 80,
    "H100-MEGA": 80,
    "H200": 141,
}

#: Per-instance spot revocation rate used when a catalog row gives none: the median of the six
#: 1-node AWS V100 availability traces of "Can't Be Late" (0.15-1.39 per available hour).
DEFAULT_SPOT_INTERRUPTION_PER_HOUR = 0.3
DEFAULT_STARTUP_SECONDS = 120.0

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Catalog:
    """Validated offerings plus the throughput and egress tables they are priced against."""

    offerings: tuple[Offering, ...]
    throughput: dict[str, float]
    egress: EgressTable
    source: str


def bundled_catalog_dir() -> Path:
    """The folder of the catalog shipped inside the package."""
    return Path(str(resources.files("budgeteer.catalog") / "data"))


def load_catalog(path: Path | None = None) -> Catalog:
    """Load the catalog at ``path`` (a folder or a ``vms.csv``); the bundled one if ``None``.

    Raises :class:`CatalogError` naming file, row and column for any malformed value, an
    accelerator absent from the throughput table, or a catalog with no usable offering.
    """
    bundled = bundled_catalog_dir()
    if path is None:
        folder, vms = bundled, bundled / "vms.csv"
    elif path.is_dir():
        folder, vms = path, path / "vms.csv"
    else:
        folder, vms = path.parent, path
    throughput_file = _first_existing(folder / "gpu_throughput.csv", bundled / "gpu_throughput.csv")
    egress_file = _first_existing(folder / "egress.csv", bundled / "egress.csv")
    throughput = load_throughput(throughput_file)
    egress = load_egress(egress_file)
    offerings = load_offerings(vms, throughput)
    return Catalog(offerings=offerings, throughput=throughput, egress=egress, source=str(vms))


def _first_existing(*paths: Path) -> Path:
    return next((p for p in paths if p.exists()), paths[-1])


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(row_number, row)`` with the header checked; row 1 is the header."""
    if not path.exists():
        raise CatalogError(str(path), None, None, "file not found")
    try:
        text = read_text(path, MAX_CATALOG_BYTES)
    except TextFileProblem as problem:
        raise CatalogError(str(path), None, None, str(problem)) from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        for column in required:
            if column not in header:
                raise CatalogError(str(path), 1, column, "missing column")
        for number, row in enumerate(reader, start=2):
            if None in row:
                raise CatalogError(str(path), number, None, "more fields than the header has")
            yield number, {k: (v or "").strip() for k, v in row.items()}
    except csv.Error as exc:  # a field over the csv module's limit, an unclosed quote …
        line = reader.reader.line_num  # (the DictReader's own count is the last good row's)
        raise CatalogError(str(path), line, None, f"not valid CSV: {exc}") from None


def _parse(
    path: Path, row: int, column: str, text: str, convert: Callable[[str], T], what: str
) -> T:
    try:
        return convert(text)
    except (ValueError, ArithmeticError) as exc:
        raise CatalogError(str(path), row, column, f"{what}, got {text!r}") from exc


def _number(
    path: Path, row: int, column: str, text: str, *, optional: bool = False, positive: bool = False
) -> float | None:
    """Parse a finite non-negative (or positive) number; blank allowed only if ``optional``."""
    if text == "":
        if optional:
            return None
        raise CatalogError(str(path), row, column, "value is required")
    value = _parse(path, row, column, text, float, "expected a number")
    if not math.isfinite(value):
        raise CatalogError(str(path), row, column, f"must be finite, got {text!r}")
    if value < 0 or (positive and value == 0):
        sign = "positive" if positive else "non-negative"
        raise CatalogError(str(path), row, column, f"must be {sign}, got {text!r}")
    return value


def _required(path: Path, row: int, column: str, text: str, *, positive: bool = False) -> float:
    value = _number(path, row, column, text, positive=positive)
    assert value is not None
    return value


def load_throughput(path: Path) -> dict[str, float]:
    """Relative training throughput per accelerator (A100-40GB = 1.0), validated."""
    table: dict[str, float] = {}
    for row, rec in _rows(path, THROUGHPUT_COLUMNS):
        name = rec["accelerator"]
        if not name:
            raise CatalogError(str(path), row, "accelerator", "value is required")
        if name in table:
            raise CatalogError(str(path), row, "accelerator", f"duplicate accelerator {name!r}")
        table[name] = _required(
            path,
            row,
            "relative_training_throughput",
            rec["relative_training_throughput"],
            positive=True,
        )
    if not table:
        raise CatalogError(str(path), None, None, "no accelerators in the throughput table")
    return table


def load_egress(path: Path) -> EgressTable:
    """Egress price bands per provider and scope, validated."""
    rates: list[EgressRate] = []
    for row, rec in _rows(path, EGRESS_COLUMNS):
        if not rec["provider"]:
            raise CatalogError(str(path), row, "provider", "value is required")
        if rec["scope"] not in EGRESS_SCOPES:
            raise CatalogError(
                str(path),
                row,
                "scope",
                f"must be one of {sorted(EGRESS_SCOPES)}, got {rec['scope']!r}",
            )
        start = _required(path, row, "tier_start_gb", rec["tier_start_gb"])
        end = _number(path, row, "tier_end_gb", rec["tier_end_gb"], optional=True)
        if end is not None and end <= start:
            raise CatalogError(str(path), row, "tier_end_gb", "must be above tier_start_gb")
        rates.append(
            EgressRate(
                provider=rec["provider"],
                scope=rec["scope"],
                tier_start_gb=start,
                tier_end_gb=end,
                usd_per_gb=_required(path, row, "usd_per_gb", rec["usd_per_gb"]),
            )
        )
    return EgressTable(tuple(rates))


@dataclass(frozen=True, slots=True)
class _Row:
    """One validated ``vms.csv`` row, before markets are split out."""

    provider: str
    region: str
    zone: str
    instance_type: str
    accelerator: str
    count: int
    vcpus: float | None
    memory_gib: float | None
    gpu_memory_gib: float
    prices: tuple[tuple[Market, float], ...]
    interruption_per_hour: float
    startup_seconds: float
    max_instances: int | None
    observed_at: datetime | None
    #: each market's price source where the row names one (a refreshed catalog does)
    sources: tuple[tuple[Market, str], ...] = ()


_MARKET_COLUMNS = (
    (Market.ON_DEMAND, "on_demand_usd_per_hour"),
    (Market.SPOT, "spot_usd_per_hour"),
    (Market.ON_PREM, "on_prem_usd_per_hour"),
    (Market.RESERVED, "reserved_usd_per_hour"),
)


#: Optional columns naming where a market's price came from (``budgeteer catalog refresh``).
_SOURCE_COLUMNS = ((Market.ON_DEMAND, "on_demand_source"), (Market.SPOT, "spot_source"))


def _vms_row(path: Path, row: int, rec: dict[str, str], throughput: dict[str, float]) -> _Row:
    for column in ("provider", "region", "instance_type", "accelerator"):
        if not rec[column]:
            raise CatalogError(str(path), row, column, "value is required")
    accelerator = rec["accelerator"]
    if accelerator not in throughput:
        raise CatalogError(
            str(path),
            row,
            "accelerator",
            f"unknown accelerator {accelerator!r}: not in the throughput table",
        )
    count = _required(path, row, "accelerator_count", rec["accelerator_count"], positive=True)
    if count != int(count):
        raise CatalogError(
            str(path), row, "accelerator_count", f"must be a whole number, got {count}"
        )
    gpu_mem = _number(path, row, "gpu_memory_gib", rec["gpu_memory_gib"], optional=True)
    if gpu_mem is None:
        gpu_mem = NOMINAL_GPU_MEMORY_GIB.get(accelerator, 0.0)
    prices = tuple(
        (market, price)
        for market, column in _MARKET_COLUMNS
        if (price := _number(path, row, column, rec.get(column, ""), optional=True)) is not None
    )
    cap = _number(path, row, "max_instances", rec.get("max_instances", ""), optional=True)
    if cap is not None and cap != int(cap):
        raise CatalogError(str(path), row, "max_instances", f"must be a whole number, got {cap}")
    startup = _number(path, row, "startup_seconds", rec.get("startup_seconds", ""), optional=True)
    rate = _number(
        path,
        row,
        "spot_interruption_per_hour",
        rec.get("spot_interruption_per_hour", ""),
        optional=True,
    )
    observed = rec.get("observed_at", "")
    sources = tuple(
        (market, text[:200])
        for market, column in _SOURCE_COLUMNS
        if (text := rec.get(column, "").strip())
    )
    return _Row(
        provider=rec["provider"],
        region=rec["region"],
        zone=rec["zones"],
        instance_type=rec["instance_type"],
        accelerator=accelerator,
        count=int(count),
        vcpus=_number(path, row, "vcpus", rec["vcpus"], optional=True),
        memory_gib=_number(path, row, "memory_gib", rec["memory_gib"], optional=True),
        gpu_memory_gib=gpu_mem,
        prices=prices,
        interruption_per_hour=DEFAULT_SPOT_INTERRUPTION_PER_HOUR if rate is None else rate,
        startup_seconds=DEFAULT_STARTUP_SECONDS if startup is None else startup,
        max_instances=None if cap is None else int(cap),
        observed_at=_parse(
            path, row, "observed_at", observed, datetime.fromisoformat, "expected an ISO time"
        )
        if observed
        else None,
        sources=sources,
    )


def load_offerings(path: Path, throughput: dict[str, float]) -> tuple[Offering, ...]:
    """Offerings from a ``vms.csv``: one per (venue, instance type, market, price).

    Rows that differ only by zone and share a price merge into one offering listing the zones.
    ``gpu_only`` rows (GCP T4/V100 GPU prices without the host VM) are skipped: priced without
    their host they would look cheaper than they are.
    """
    merged: dict[tuple[str, str, str, Market, float], tuple[_Row, list[str]]] = {}
    for row, rec in _rows(path, VMS_COLUMNS):
        basis = rec["price_basis"] or "instance"
        if basis not in PRICE_BASES:
            raise CatalogError(
                str(path),
                row,
                "price_basis",
                f"must be one of {sorted(PRICE_BASES)}, got {basis!r}",
            )
        if basis == "gpu_only":
            continue
        parsed = _vms_row(path, row, rec, throughput)
        for market, price in parsed.prices:
            key = (parsed.provider, parsed.region, parsed.instance_type, market, price)
            entry = merged.setdefault(key, (parsed, []))
            if parsed.zone and parsed.zone not in entry[1]:
                entry[1].append(parsed.zone)
    if not merged:
        raise CatalogError(str(path), None, None, "the catalog has no usable offering")
    offerings = [
        _offering(path, key[3], key[4], row, zones) for key, (row, zones) in merged.items()
    ]
    return tuple(sorted(offerings, key=lambda o: o.id))


def _offering(path: Path, market: Market, price: float, row: _Row, zones: list[str]) -> Offering:
    zone_part = "+".join(sorted(zones)) if market is Market.SPOT and zones else "*"
    return Offering(
        id=f"{row.provider}/{row.region}/{zone_part}/{row.instance_type}/{market.value}",
        provider=row.provider,
        region=row.region,
        zones=tuple(sorted(zones)),
        instance_type=row.instance_type,
        accelerator=row.accelerator,
        accelerators_per_instance=row.count,
        vcpus=row.vcpus,
        memory_gib=row.memory_gib,
        gpu_memory_gib=row.gpu_memory_gib,
        market=market,
        price=Price(
            usd_per_hour=price,
            source=dict(row.sources).get(market, f"catalog:{path.name}"),
            observed_at=row.observed_at,
        ),
        interruption_per_hour=row.interruption_per_hour if market is Market.SPOT else 0.0,
        startup_seconds=row.startup_seconds,
        max_instances=row.max_instances,
    )
