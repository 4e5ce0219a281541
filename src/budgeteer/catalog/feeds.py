"""Live prices, fetched: the clouds' price APIs page by page (the parsing is
:mod:`budgeteer.catalog.quotes`).

- Azure Retail Prices (``https://prices.azure.com/api/retail/prices``, no credentials): an OData
  ``$filter`` on the service, region and price type; follow ``NextPageLink``.
- GCP Cloud Billing Catalog (``…/v1/services/6F81-5844-456A/skus``, an API key): follow
  ``nextPageToken``.
- AWS: the Pricing API (``GetProducts``, served from us-east-1) and EC2's
  ``DescribeSpotPriceHistory`` (the last hours) and ``DescribeAvailabilityZones`` (zone names to
  ids), through boto3's paginators (which refuse a token seen twice) with its own retries.

HTTP answers 429 and 5xx (and timeouts) are tried again after a backoff (``Retry-After`` when
given, else 1, 2, 4 … s, at most ``max_tries``); a page that repeats a link or token already
followed is a paging loop (:class:`~budgeteer.catalog.quotes.FeedError`), and so is a run of more
than ``max_pages``.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

import httpx

from budgeteer.catalog.quotes import (
    AWS_PRICING,
    AWS_SPOT,
    AZURE,
    GCP,
    FeedError,
    GcpShape,
    Quote,
    aws_on_demand,
    aws_spot,
    azure_retail,
    gcp_parts,
    gcp_vms,
)

AZURE_URL = "https://prices.azure.com/api/retail/prices"
GCP_URL = "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus"
#: Pages followed at most per feed (Azure's VM prices for one region are a few hundred).
MAX_PAGES = 5000


class Http:
    """GETs of JSON with retries (see the module docstring)."""

    def __init__(
        self,
        feed: str,
        client: httpx.Client | None = None,
        *,
        max_tries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.feed = feed
        self.client = client or httpx.Client(timeout=30.0, follow_redirects=True)
        self.max_tries = max_tries
        self.sleep = sleep
        self.retries = 0

    def get(self, url: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """The JSON object at ``url``."""
        for attempt in range(self.max_tries):
            try:
                resp = self.client.get(url, params=params)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                wait = 2.0**attempt
            else:
                if resp.status_code == 429 or resp.status_code >= 500:
                    problem = f"HTTP {resp.status_code}"
                    wait = _retry_after(resp.headers.get("Retry-After"), 2.0**attempt)
                elif resp.status_code != 200:
                    raise FeedError(
                        self.feed, _short(url), f"HTTP {resp.status_code}: {resp.text[:200]}"
                    )
                else:
                    try:
                        body = resp.json()
                    except ValueError:
                        raise FeedError(self.feed, _short(url), "not JSON") from None
                    if not isinstance(body, dict):
                        raise FeedError(self.feed, _short(url), "expected a JSON object")
                    return body
            if attempt + 1 < self.max_tries:
                self.retries += 1
                self.sleep(min(wait, 60.0))
        raise FeedError(self.feed, _short(url), f"gave up after {self.max_tries} tries ({problem})")


def _retry_after(header: str | None, default: float) -> float:
    try:
        return max(0.0, float(header)) if header else default
    except ValueError:
        return default


def _short(url: str) -> str:
    return url if len(url) <= 160 else url[:157] + "..."


def azure_quotes(
    http: Http, region: str, fetched_at: datetime, base_url: str = AZURE_URL
) -> list[Quote]:
    """Every VM price of ``region`` (consumption, Linux; spot and on-demand)."""
    flt = (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' "
        "and priceType eq 'Consumption'"
    )
    url: str | None = f"{base_url}?{urllib.parse.urlencode({'$filter': flt})}"
    seen: set[str] = set()
    quotes: list[Quote] = []
    page = 0
    while url:
        if url in seen:
            raise FeedError(AZURE, f"page {page}", f"paging loop: NextPageLink {_short(url)} again")
        if page >= MAX_PAGES:
            raise FeedError(AZURE, f"page {page}", f"more than {MAX_PAGES} pages")
        seen.add(url)
        body = http.get(url)
        items = body.get("Items")
        if not isinstance(items, list):
            raise FeedError(AZURE, f"page {page}.Items", "expected a list")
        quotes += azure_retail(items, fetched_at, f"page {page}.Items")
        nxt = body.get("NextPageLink")
        if nxt is not None and not isinstance(nxt, str):
            raise FeedError(AZURE, f"page {page}.NextPageLink", "expected a URL")
        url = nxt or None
        page += 1
    return quotes


def gcp_quotes(
    http: Http,
    api_key: str,
    shapes: Sequence[GcpShape],
    fetched_at: datetime,
    base_url: str = GCP_URL,
) -> list[Quote]:
    """The shapes' prices from Compute Engine's SKUs (every page)."""
    skus: list[Any] = []
    token = ""
    seen: set[str] = set()
    for page in range(MAX_PAGES):
        params = {"key": api_key, "pageSize": "5000"}
        if token:
            params["pageToken"] = token
        body = http.get(base_url, params)
        items = body.get("skus", [])
        if not isinstance(items, list):
            raise FeedError(GCP, f"page {page}.skus", "expected a list")
        skus += items
        token = body.get("nextPageToken") or ""
        if not isinstance(token, str):
            raise FeedError(GCP, f"page {page}.nextPageToken", "expected a string")
        if not token:
            return gcp_vms(gcp_parts(skus, fetched_at), shapes, fetched_at)
        if token in seen:
            raise FeedError(GCP, f"page {page}", f"paging loop: nextPageToken {token[:40]!r} again")
        seen.add(token)
    raise FeedError(GCP, f"page {MAX_PAGES}", f"more than {MAX_PAGES} pages")


def aws_quotes(
    pricing: Any,
    ec2: Any,
    region: str,
    instance_types: Sequence[str],
    fetched_at: datetime,
    spot_hours: float = 3.0,
) -> list[Quote]:
    """On-demand (Pricing API) and spot (the newest price of the last ``spot_hours`` per zone)
    for ``instance_types`` in ``region``; ``pricing`` and ``ec2`` are boto3 clients."""
    quotes: list[Quote] = []
    filters = [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
        {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
        {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
        {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    ]
    for itype in instance_types:
        price_list: list[str] = []
        pages = _pages(
            AWS_PRICING,
            pricing,
            "get_products",
            ServiceCode="AmazonEC2",
            Filters=[*filters, {"Type": "TERM_MATCH", "Field": "instanceType", "Value": itype}],
        )
        for page in pages:
            items = page.get("PriceList", [])
            if not isinstance(items, list):
                raise FeedError(AWS_PRICING, "PriceList", "expected a list")
            price_list += items
        quotes += aws_on_demand(price_list, fetched_at)
    zones = _call(AWS_SPOT, ec2, "describe_availability_zones").get("AvailabilityZones", [])
    zone_ids = {
        str(z["ZoneName"]): str(z["ZoneId"])
        for z in zones
        if isinstance(z, dict) and "ZoneName" in z and "ZoneId" in z
    }
    history: list[Any] = []
    pages = _pages(
        AWS_SPOT,
        ec2,
        "describe_spot_price_history",
        InstanceTypes=list(instance_types),
        ProductDescriptions=["Linux/UNIX"],
        StartTime=fetched_at - timedelta(hours=spot_hours),
    )
    for page in pages:
        items = page.get("SpotPriceHistory", [])
        if not isinstance(items, list):
            raise FeedError(AWS_SPOT, "SpotPriceHistory", "expected a list")
        history += items
    return quotes + aws_spot(history, region, zone_ids, fetched_at)


def _pages(feed: str, client: Any, op: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    try:
        yield from client.get_paginator(op).paginate(**kwargs)
    except Exception as exc:  # botocore's PaginationError (a token twice), ClientError …
        raise FeedError(feed, op, f"{type(exc).__name__}: {exc}") from None


def _call(feed: str, client: Any, op: str, **kwargs: Any) -> dict[str, Any]:
    try:
        reply = getattr(client, op)(**kwargs)
    except Exception as exc:
        raise FeedError(feed, op, f"{type(exc).__name__}: {exc}") from None
    return dict(reply)
