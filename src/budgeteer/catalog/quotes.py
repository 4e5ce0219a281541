"""Live prices, read: the clouds' price pages turned into :class:`Quote` s, and quotes folded
into a catalog's ``vms.csv`` rows. Pure: the pages come from :mod:`budgeteer.catalog.feeds`.

- **AWS on-demand**: the Pricing API's ``GetProducts`` ``PriceList`` (JSON strings): product
  ``attributes`` (``instanceType``, ``regionCode``; Linux, shared tenancy, no pre-installed
  software, ``capacitystatus`` Used) and ``terms.OnDemand.*.priceDimensions.*.pricePerUnit.USD``
  per ``Hrs``.
- **AWS spot**: ``DescribeSpotPriceHistory`` records (``AvailabilityZone``, ``InstanceType``,
  ``ProductDescription`` Linux/UNIX, ``SpotPrice`` as a string, ``Timestamp``): the newest per
  zone and type, zone *names* mapped to the AZ *ids* the catalog uses (``us-east-1a`` →
  ``use1-az6`` differs per account: ``DescribeAvailabilityZones`` gives the map).
- **Azure**: the Retail Prices API's ``Items``: ``type`` Consumption, ``unitOfMeasure`` "1 Hour",
  USD, not Windows (``productName``); ``skuName`` ending "Spot" → spot, "Low Priority" (Batch's
  retired market) skipped; ``armSkuName`` is the instance type, ``armRegionName`` the region.
- **GCP**: the Cloud Billing Catalog's SKUs of Compute Engine: a VM's price is built from its
  parts, cores × the family's core SKU + GiB × its RAM SKU + GPUs × the GPU SKU (usage type
  OnDemand, or Preemptible for spot, whose descriptions start "Spot Preemptible"), each
  ``units + nanos / 1e9`` per hour, in the SKU's ``serviceRegions``.

Every quote carries its source (API and SKU, meter or zone) and when it was fetched.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from budgeteer.domain.offering import Market
from budgeteer.errors import BudgeteerError


class FeedError(BudgeteerError):
    """A price page that cannot be read: which feed, where in it, and what is wrong."""

    def __init__(self, feed: str, where: str, problem: str) -> None:
        super().__init__(f"{feed}: {where}: {problem}")
        self.feed, self.where, self.problem = feed, where, problem


@dataclass(frozen=True, slots=True)
class Quote:
    """One price per instance-hour: ``zone`` empty when it holds for every zone of the region."""

    provider: str
    region: str
    zone: str
    instance_type: str
    market: Market
    usd_per_hour: Decimal
    source: str
    observed_at: datetime


def _usd(feed: str, where: str, value: Any) -> Decimal:
    try:
        usd = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise FeedError(feed, where, f"not a price: {str(value)[:40]!r}") from None
    if not usd.is_finite() or usd < 0:
        raise FeedError(feed, where, f"not a price: {str(value)[:40]!r}")
    return usd


def _nanos(where: str, value: Any) -> Decimal:
    """The nanos of a GCP ``Money`` (0–999,999,999 for a price; a JSON number or a numeral)."""
    try:
        count = int(str(value or 0))
    except ValueError:
        raise FeedError(GCP, where, f"not a whole count of nanos: {str(value)[:40]!r}") from None
    if not 0 <= count < 1_000_000_000:
        raise FeedError(GCP, where, f"not in 0..999999999: {count}")
    return Decimal(count) / Decimal(1_000_000_000)


def _mapping(feed: str, where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FeedError(feed, where, f"expected an object, got {type(value).__name__}")
    return value


# -- AWS ----------------------------------------------------------------------------------------
AWS_PRICING = "aws-pricing"
AWS_SPOT = "aws-spot-history"


def aws_on_demand(price_list: Iterable[str], fetched_at: datetime) -> list[Quote]:
    """Quotes from ``GetProducts`` pages' ``PriceList`` items (JSON strings)."""
    quotes = []
    for i, raw in enumerate(price_list):
        where = f"PriceList[{i}]"
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, TypeError):
            raise FeedError(AWS_PRICING, where, "not a JSON document") from None
        product = _mapping(
            AWS_PRICING, f"{where}.product", _mapping(AWS_PRICING, where, doc).get("product")
        )
        attrs = _mapping(AWS_PRICING, f"{where}.product.attributes", product.get("attributes"))
        if (
            attrs.get("operatingSystem") != "Linux"
            or attrs.get("tenancy") != "Shared"
            or attrs.get("preInstalledSw", "NA") != "NA"
            or attrs.get("capacitystatus", "Used") != "Used"
        ):
            continue
        itype, region = attrs.get("instanceType"), attrs.get("regionCode")
        if not isinstance(itype, str) or not isinstance(region, str):
            raise FeedError(
                AWS_PRICING, f"{where}.product.attributes", "no instanceType/regionCode"
            )
        terms = _mapping(AWS_PRICING, f"{where}.terms", doc.get("terms", {}))
        on_demand = _mapping(AWS_PRICING, f"{where}.terms.OnDemand", terms.get("OnDemand", {}))
        for term_id, term in on_demand.items():
            dims = _mapping(AWS_PRICING, f"{where}.terms.OnDemand.{term_id}", term)
            for dim_id, raw_dim in _mapping(
                AWS_PRICING, where, dims.get("priceDimensions", {})
            ).items():
                dim = _mapping(AWS_PRICING, f"{where}.priceDimensions.{dim_id}", raw_dim)
                if dim.get("unit") not in {"Hrs", "Hours"}:
                    continue
                per_unit = _mapping(AWS_PRICING, f"{where}.pricePerUnit", dim.get("pricePerUnit"))
                usd = _usd(AWS_PRICING, f"{where}.pricePerUnit.USD", per_unit.get("USD"))
                if usd == 0:
                    continue  # a placeholder dimension (e.g. reserved capacity)
                sku = product.get("sku", term_id)
                quotes.append(
                    Quote(
                        "aws",
                        region,
                        "",
                        itype,
                        Market.ON_DEMAND,
                        usd,
                        f"{AWS_PRICING}:{sku}",
                        fetched_at,
                    )
                )
    return quotes


def aws_spot(
    history: Iterable[Mapping[str, Any]],
    region: str,
    zone_ids: Mapping[str, str],
    fetched_at: datetime,
) -> list[Quote]:
    """The newest spot price per zone (as its AZ id) and instance type."""
    newest: dict[tuple[str, str], tuple[Any, Mapping[str, Any]]] = {}
    for i, raw in enumerate(history):
        rec = _mapping(AWS_SPOT, f"SpotPriceHistory[{i}]", raw)
        if rec.get("ProductDescription") not in {"Linux/UNIX", "Linux/UNIX (Amazon VPC)"}:
            continue
        zone, itype = rec.get("AvailabilityZone"), rec.get("InstanceType")
        if not isinstance(zone, str) or not isinstance(itype, str):
            raise FeedError(AWS_SPOT, f"SpotPriceHistory[{i}]", "no AvailabilityZone/InstanceType")
        stamp = rec.get("Timestamp")
        key = (zone, itype)
        if key not in newest or (stamp is not None and stamp > newest[key][0]):
            newest[key] = (stamp, rec)
    quotes = []
    for (zone, itype), (stamp, rec) in sorted(newest.items()):
        usd = _usd(AWS_SPOT, f"SpotPrice of {zone} {itype}", rec.get("SpotPrice"))
        zone_id = zone_ids.get(zone, zone)
        observed = stamp if isinstance(stamp, datetime) else fetched_at
        quotes.append(
            Quote(
                "aws", region, zone_id, itype, Market.SPOT, usd, f"{AWS_SPOT}:{zone_id}", observed
            )
        )
    return quotes


# -- Azure --------------------------------------------------------------------------------------
AZURE = "azure-retail"


def azure_retail(items: Sequence[Any], fetched_at: datetime, where: str = "Items") -> list[Quote]:
    """Quotes from one Retail Prices page's ``Items``."""
    quotes = []
    for i, raw in enumerate(items):
        item = _mapping(AZURE, f"{where}[{i}]", raw)
        if (
            item.get("type") != "Consumption"
            or item.get("unitOfMeasure") != "1 Hour"
            or item.get("currencyCode", "USD") != "USD"
            or "Windows" in str(item.get("productName", ""))
        ):
            continue
        sku_name = str(item.get("skuName", ""))
        if sku_name.endswith("Low Priority"):
            continue
        market = Market.SPOT if sku_name.endswith("Spot") else Market.ON_DEMAND
        itype, region = item.get("armSkuName"), item.get("armRegionName")
        if not isinstance(itype, str) or not itype or not isinstance(region, str):
            raise FeedError(AZURE, f"{where}[{i}]", "no armSkuName/armRegionName")
        usd = _usd(AZURE, f"{where}[{i}].retailPrice", item.get("retailPrice"))
        meter = item.get("meterId", item.get("skuId", ""))
        quotes.append(
            Quote("azure", region, "", itype, market, usd, f"{AZURE}:{meter}", fetched_at)
        )
    return quotes


# -- GCP ----------------------------------------------------------------------------------------
GCP = "gcp-billing"
#: The SKU description of each accelerator's GPU (Compute Engine's names in the catalog).
GCP_GPU_SKUS = {
    "T4": "Nvidia Tesla T4 GPU",
    "V100": "Nvidia Tesla V100 GPU",
    "A100": "Nvidia Tesla A100 GPU",
    "A100-80GB": "Nvidia Tesla A100 80GB GPU",
    "L4": "Nvidia L4 GPU",
    "H100": "Nvidia H100 80GB GPU",
    "H100-MEGA": "Nvidia H100 80GB Mega GPU",
    "H200": "Nvidia H200 141GB GPU",
}
#: Spot SKUs' descriptions start with this.
GCP_SPOT_PREFIX = "Spot Preemptible "


@dataclass(frozen=True, slots=True)
class GcpShape:
    """A machine type to price from parts: its family's cores and RAM, and its GPUs."""

    region: str
    instance_type: str
    vcpus: float
    memory_gib: float
    accelerator: str
    gpus: int


def gcp_parts(
    skus: Iterable[Any], fetched_at: datetime
) -> dict[tuple[str, Market, str], tuple[Decimal, str]]:
    """(region, market, part description) → (USD per unit-hour, SKU id), from Compute Engine
    SKUs. The part is the description before " running in" with the spot prefix removed."""
    parts: dict[tuple[str, Market, str], tuple[Decimal, str]] = {}
    for i, raw in enumerate(skus):
        where = f"skus[{i}]"
        sku = _mapping(GCP, where, raw)
        category = _mapping(GCP, f"{where}.category", sku.get("category", {}))
        usage = category.get("usageType")
        if usage not in {"OnDemand", "Preemptible"}:
            continue
        description = str(sku.get("description", ""))
        name = description.split(" running in ", maxsplit=1)[0]
        market = Market.SPOT if usage == "Preemptible" else Market.ON_DEMAND
        name = name.removeprefix(GCP_SPOT_PREFIX).removeprefix("Preemptible ")
        info = sku.get("pricingInfo") or []
        if not isinstance(info, list) or not info:
            raise FeedError(GCP, f"{where}.pricingInfo", "missing")
        expression = _mapping(GCP, f"{where}.pricingInfo[0]", info[0]).get("pricingExpression", {})
        rates = _mapping(GCP, f"{where}.pricingExpression", expression).get("tieredRates") or []
        if not isinstance(rates, list) or not rates:
            raise FeedError(GCP, f"{where}.tieredRates", "missing")
        unit = _mapping(GCP, f"{where}.tieredRates[-1]", rates[-1]).get("unitPrice", {})
        unit = _mapping(GCP, f"{where}.unitPrice", unit)
        units = _usd(GCP, f"{where}.unitPrice.units", unit.get("units", "0") or "0")
        nanos = _nanos(f"{where}.unitPrice.nanos", unit.get("nanos", 0))
        usage_unit = expression.get("usageUnit")
        if usage_unit not in {"h", "GiBy.h"}:
            continue
        regions = sku.get("serviceRegions") or []
        if not isinstance(regions, list):
            raise FeedError(GCP, f"{where}.serviceRegions", "expected a list")
        for region in regions:
            parts[(str(region), market, name)] = (units + nanos, str(sku.get("skuId", "")))
    return parts


def gcp_vms(
    parts: Mapping[tuple[str, Market, str], tuple[Decimal, str]],
    shapes: Iterable[GcpShape],
    fetched_at: datetime,
) -> list[Quote]:
    """Each shape's price per market where all its parts are priced: cores × core SKU + GiB ×
    RAM SKU + GPUs × GPU SKU (family from the machine type: ``a2-highgpu-1g`` → "A2")."""
    quotes = []
    for shape in shapes:
        family = shape.instance_type.split("-")[0].upper()
        gpu = GCP_GPU_SKUS.get(shape.accelerator)
        if gpu is None:
            continue
        for market in (Market.ON_DEMAND, Market.SPOT):
            core = parts.get((shape.region, market, f"{family} Instance Core"))
            ram = parts.get((shape.region, market, f"{family} Instance Ram"))
            card = parts.get((shape.region, market, gpu))
            if core is None or ram is None or card is None:
                continue
            usd = (
                Decimal(repr(shape.vcpus)) * core[0]
                + Decimal(repr(shape.memory_gib)) * ram[0]
                + shape.gpus * card[0]
            )
            source = f"{GCP}:{core[1]}+{ram[1]}+{card[1]}"
            quotes.append(
                Quote("gcp", shape.region, "", shape.instance_type, market, usd, source, fetched_at)
            )
    return quotes


# -- into the catalog ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Refreshed:
    """The rows after the quotes, and what changed: ``updated`` prices, ``stale`` rows of a
    refreshed provider no quote matched (kept at their old price and source)."""

    rows: list[dict[str, str]]
    updated: int
    stale: list[str]


_PRICE_COLUMNS = {Market.ON_DEMAND: "on_demand_usd_per_hour", Market.SPOT: "spot_usd_per_hour"}
_SOURCE_COLUMNS = {Market.ON_DEMAND: "on_demand_source", Market.SPOT: "spot_source"}


def apply_quotes(
    rows: Sequence[Mapping[str, str]],
    quotes: Iterable[Quote],
    refreshed: Iterable[tuple[str, str]],
) -> Refreshed:
    """``rows`` (a ``vms.csv``) with the quotes' prices: a zone's own quote first, else the
    region's. Each changed price gets its source and the row its ``observed_at``; rows of the
    ``refreshed`` (provider, region) pairs left without any quote are reported stale."""
    index: dict[tuple[str, str, str, str, Market], Quote] = {}
    for q in quotes:
        index[(q.provider, q.region, q.zone, q.instance_type, q.market)] = q
    scope = set(refreshed)
    out: list[dict[str, str]] = []
    updated = 0
    stale: list[str] = []
    for row in rows:
        new = dict(row)
        new.setdefault("on_demand_source", "")
        new.setdefault("spot_source", "")
        new.setdefault("observed_at", "")
        in_scope = (row["provider"], row["region"]) in scope
        if in_scope and row.get("price_basis", "instance") != "gpu_only":
            seen = False
            for market, column in _PRICE_COLUMNS.items():
                key = (row["provider"], row["region"], row.get("zones", ""), row["instance_type"])
                found = index.get((*key, market)) or index.get((*key[:2], "", key[3], market))
                if found is None:
                    continue
                seen = True
                new[column] = format(found.usd_per_hour.normalize(), "f")
                new[_SOURCE_COLUMNS[market]] = found.source
                new["observed_at"] = found.observed_at.isoformat()
                updated += 1
            if not seen:
                zone = row.get("zones") or "*"
                stale.append(f"{row['provider']}/{row['region']}/{zone}/{row['instance_type']}")
        out.append(new)
    return Refreshed(out, updated, stale)
