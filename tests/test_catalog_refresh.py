"""Live prices: the clouds' price pages (in their recorded shapes, ``../shared/notes/clouds.md``)
served over HTTP on 127.0.0.1 for Azure and GCP, and AWS's through botocore's ``Stubber`` (moto
implements neither the Pricing API nor moving spot prices); the pure parsers; and ``budgeteer
catalog refresh`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from budgeteer.catalog import load_catalog
from budgeteer.catalog.feeds import Http, azure_quotes, gcp_quotes
from budgeteer.catalog.quotes import (
    FeedError,
    GcpShape,
    aws_on_demand,
    azure_retail,
    gcp_parts,
    gcp_vms,
)
from budgeteer.domain.offering import Market
from engines import engine_missing

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
PY = sys.executable


class PriceServer:
    """Serves ``pages[path_and_query]`` (a JSON body, or an int status) in order of asks; a
    path asked more often than it has answers gets the last one."""

    def __init__(self) -> None:
        self.pages: dict[str, list[Any]] = {}
        self.asked: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(parsed.query))
                key = parsed.path + (f"?page={query['page']}" if "page" in query else "")
                if "pageToken" in query:
                    key = parsed.path + f"?pageToken={query['pageToken']}"
                server.asked.append(key)
                answers = server.pages.get(key) or [404]
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                if isinstance(answer, int):
                    self.send_response(answer)
                    if answer == 429:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    return
                body = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[PriceServer]:
    s = PriceServer()
    yield s
    s.close()


def _azure_item(sku: str, price: float, **over: Any) -> dict[str, Any]:
    item = {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": "eastus",
        "location": "US East",
        "effectiveStartDate": "2025-06-01T00:00:00Z",
        "meterId": f"meter-{sku}-{over.get('skuName', 'x')}",
        "meterName": "NC24ads A100 v4",
        "productName": "Virtual Machines NCadsA100v4 Series",
        "skuName": "NC24ads A100 v4",
        "armSkuName": sku,
        "serviceName": "Virtual Machines",
        "type": "Consumption",
        "isPrimaryMeterRegion": True,
        "unitOfMeasure": "1 Hour",
    }
    item.update(over)
    return item


AZURE_ITEMS = [
    _azure_item("Standard_NC24ads_A100_v4", 3.70),
    _azure_item("Standard_NC24ads_A100_v4", 0.50, skuName="NC24ads A100 v4 Spot"),
    _azure_item("Standard_NC24ads_A100_v4", 0.40, skuName="NC24ads A100 v4 Low Priority"),
    _azure_item(
        "Standard_NC24ads_A100_v4", 4.90, productName="Virtual Machines NCadsA100v4 Series Windows"
    ),
    _azure_item("Standard_NC24ads_A100_v4", 1.10, type="DevTestConsumption"),
    _azure_item("Standard_NC24ads_A100_v4", 20000.0, type="Reservation", unitOfMeasure="1 Year"),
]


def _page(items: list[Any], nxt: str | None) -> dict[str, Any]:
    return {
        "BillingCurrency": "USD",
        "CustomerEntityId": "Default",
        "CustomerEntityType": "Retail",
        "Items": items,
        "NextPageLink": nxt,
        "Count": len(items),
    }


def test_azure_items_keep_linux_consumption_and_spot_only() -> None:
    quotes = azure_retail(AZURE_ITEMS, NOW)
    got = {(q.instance_type, q.market): q.usd_per_hour for q in quotes}
    assert got == {
        ("Standard_NC24ads_A100_v4", Market.ON_DEMAND): Decimal("3.7"),
        ("Standard_NC24ads_A100_v4", Market.SPOT): Decimal("0.5"),
    }
    assert all(q.source.startswith("azure-retail:meter-") for q in quotes)
    assert all(q.observed_at == NOW for q in quotes)


def test_azure_pages_are_followed_and_throttling_retried(server: PriceServer) -> None:
    base = f"{server.url}/api/retail/prices"
    # the first link carries the $filter; NextPageLink pages carry ?page=
    server.pages["/api/retail/prices"] = [429, _page(AZURE_ITEMS[:1], f"{base}?page=2")]
    server.pages["/api/retail/prices?page=2"] = [503, _page(AZURE_ITEMS[1:], None)]
    slept: list[float] = []
    http = Http("azure-retail", sleep=slept.append)
    quotes = azure_quotes(http, "eastus", NOW, base)
    assert len(quotes) == 2
    assert http.retries == 2
    assert slept == [0.0, 1.0]  # Retry-After: 0; then no header: the backoff's first step
    assert server.asked.count("/api/retail/prices?page=2") == 2


def test_azure_paging_loop_and_malformed_pages_are_named(server: PriceServer) -> None:
    base = f"{server.url}/api/retail/prices"
    server.pages["/api/retail/prices"] = [_page([], f"{base}?page=2")]
    server.pages["/api/retail/prices?page=2"] = [_page([], f"{base}?page=2")]
    with pytest.raises(FeedError, match="paging loop"):
        azure_quotes(Http("azure-retail", sleep=lambda _: None), "eastus", NOW, base)
    server.pages["/api/retail/prices"] = [{"Items": "nope"}]
    with pytest.raises(FeedError, match=r"page 0\.Items: expected a list"):
        azure_quotes(Http("azure-retail", sleep=lambda _: None), "eastus", NOW, base)
    server.pages["/api/retail/prices"] = [_page([_azure_item("X", "free")], None)]  # type: ignore[arg-type]
    with pytest.raises(FeedError, match=r"retailPrice: not a price"):
        azure_quotes(Http("azure-retail", sleep=lambda _: None), "eastus", NOW, base)
    server.pages["/api/retail/prices"] = [500]
    with pytest.raises(FeedError, match="gave up after 3 tries"):
        azure_quotes(Http("azure-retail", max_tries=3, sleep=lambda _: None), "eastus", NOW, base)


def _gcp_sku(
    description: str, group: str, usage: str, units: str, nanos: int, unit: str = "h"
) -> dict[str, Any]:
    return {
        "name": f"services/6F81-5844-456A/skus/{abs(hash(description)) % 10**8:08X}",
        "skuId": f"SKU-{abs(hash(description)) % 10**6}",
        "description": description,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": ["us-central1"],
        "pricingInfo": [
            {
                "pricingExpression": {
                    "usageUnit": unit,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": units, "nanos": nanos},
                        }
                    ],
                }
            }
        ],
    }


#: Compute Engine's public list prices in us-central1 (A2 cores, RAM, A100), on-demand and spot
GCP_SKUS = [
    _gcp_sku("A2 Instance Core running in Americas", "CPU", "OnDemand", "0", 31611000),
    _gcp_sku("A2 Instance Ram running in Americas", "RAM", "OnDemand", "0", 4237000, "GiBy.h"),
    _gcp_sku("Nvidia Tesla A100 GPU running in Americas", "GPU", "OnDemand", "2", 933908000),
    _gcp_sku(
        "Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", "0", 9483000
    ),
    _gcp_sku(
        "Spot Preemptible A2 Instance Ram running in Americas",
        "RAM",
        "Preemptible",
        "0",
        1271000,
        "GiBy.h",
    ),
    _gcp_sku(
        "Spot Preemptible Nvidia Tesla A100 GPU running in Americas",
        "GPU",
        "Preemptible",
        "0",
        880172000,
    ),
    _gcp_sku("Commitment v1: A2 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", "0", 19915000),
]
A2_1G = GcpShape("us-central1", "a2-highgpu-1g", 12.0, 85.0, "A100", 1)


def test_gcp_vm_price_is_cores_plus_ram_plus_gpus() -> None:
    quotes = gcp_vms(gcp_parts(GCP_SKUS, NOW), [A2_1G], NOW)
    got = {q.market: q.usd_per_hour for q in quotes}
    # 12 × 0.031611 + 85 × 0.004237 + 2.933908 = 3.673385 (the public a2-highgpu-1g price)
    assert got[Market.ON_DEMAND] == Decimal("3.673385")
    assert got[Market.SPOT] == Decimal("12") * Decimal("0.009483") + Decimal("85") * Decimal(
        "0.001271"
    ) + Decimal("0.880172")
    # a shape whose parts are not all priced gets no quote (never a partial sum)
    h100 = GcpShape("us-central1", "a3-highgpu-1g", 26.0, 234.0, "H100", 1)
    assert gcp_vms(gcp_parts(GCP_SKUS, NOW), [h100], NOW) == []


@pytest.mark.parametrize(
    ("nanos", "problem"),
    [
        ("abc", r"not a whole count of nanos: 'abc'"),
        (1.5, r"not a whole count of nanos: '1.5'"),
        ({"n": 1}, r"not a whole count of nanos: \"\{'n': 1\}\""),
        (-5, r"not in 0\.\.999999999: -5"),  # a negative price
        (10**9, r"not in 0\.\.999999999: 1000000000"),
    ],
)
def test_gcp_nanos_that_are_no_price_are_named(nanos: Any, problem: str) -> None:
    sku = _gcp_sku("A2 Instance Core running in Americas", "CPU", "OnDemand", "0", 0)
    sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["nanos"] = nanos
    with pytest.raises(FeedError, match=r"skus\[1\]\.unitPrice\.nanos: " + problem):
        gcp_parts([GCP_SKUS[0], sku], NOW)
    assert gcp_parts([GCP_SKUS[0]], NOW)  # the good one alone is read


def test_gcp_pages_by_token_and_a_token_twice_is_a_loop(server: PriceServer) -> None:
    path = "/v1/services/6F81-5844-456A/skus"
    server.pages[path] = [{"skus": GCP_SKUS[:3], "nextPageToken": "t2"}]
    server.pages[f"{path}?pageToken=t2"] = [{"skus": GCP_SKUS[3:], "nextPageToken": ""}]
    http = Http("gcp-billing", sleep=lambda _: None)
    quotes = gcp_quotes(http, "key", [A2_1G], NOW, server.url + path)
    assert {q.market for q in quotes} == {Market.ON_DEMAND, Market.SPOT}
    server.pages[f"{path}?pageToken=t2"] = [{"skus": [], "nextPageToken": "t2"}]
    with pytest.raises(FeedError, match="paging loop"):
        gcp_quotes(http, "key", [A2_1G], NOW, server.url + path)


def _aws_product(itype: str, usd: str, **attrs: str) -> str:
    attributes = {
        "instanceType": itype,
        "regionCode": "us-east-1",
        "location": "US East (N. Virginia)",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "vcpu": "8",
        "memory": "61 GiB",
        **attrs,
    }
    sku = f"SKU{abs(hash((itype, usd, tuple(attrs.items())))) % 10**6}"
    return json.dumps(
        {
            "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": usd},
                                "description": f"${usd} per On Demand Linux {itype} Instance Hour",
                            }
                        },
                        "sku": sku,
                    }
                }
            },
        }
    )


def test_aws_on_demand_keeps_linux_shared_used_capacity_only() -> None:
    items = [
        _aws_product("p3.2xlarge", "3.0600000000"),
        _aws_product("p3.2xlarge", "3.0600000000", capacitystatus="UnusedCapacityReservation"),
        _aws_product("p3.2xlarge", "5.0000000000", operatingSystem="Windows"),
        _aws_product("p3.2xlarge", "3.2000000000", tenancy="Dedicated"),
        _aws_product("p3.2xlarge", "0.0000000000"),
    ]
    quotes = aws_on_demand(items, NOW)
    assert [(q.instance_type, q.usd_per_hour, q.zone) for q in quotes] == [
        ("p3.2xlarge", Decimal("3.06"), "")
    ]
    assert quotes[0].source.startswith("aws-pricing:SKU")
    with pytest.raises(FeedError, match=r"PriceList\[0\]: not a JSON document"):
        aws_on_demand(["{nope"], NOW)


def test_aws_quotes_through_boto3_pages_and_zone_ids() -> None:
    try:
        import boto3  # noqa: PLC0415
        from botocore.stub import ANY, Stubber  # noqa: PLC0415
    except ImportError:
        engine_missing("boto3 is not installed (pip install 'budgeteer[aws-test]')")

    from budgeteer.catalog.feeds import aws_quotes  # noqa: PLC0415

    keys = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "y"}
    pricing, ec2 = boto3.client("pricing", **keys), boto3.client("ec2", **keys)
    with Stubber(pricing) as p, Stubber(ec2) as e:
        p.add_response(
            "get_products",
            {
                "PriceList": [_aws_product("p3.2xlarge", "3.06")],
                "NextToken": "n1",
                "FormatVersion": "aws_v1",
            },
            {"ServiceCode": "AmazonEC2", "Filters": ANY},
        )
        p.add_response(
            "get_products",
            {"PriceList": [], "FormatVersion": "aws_v1"},
            {"ServiceCode": "AmazonEC2", "Filters": ANY, "NextToken": "n1"},
        )
        e.add_response(
            "describe_availability_zones",
            {
                "AvailabilityZones": [
                    {"ZoneName": "us-east-1a", "ZoneId": "use1-az6", "RegionName": "us-east-1"},
                    {"ZoneName": "us-east-1b", "ZoneId": "use1-az1", "RegionName": "us-east-1"},
                ]
            },
            {},
        )
        old = datetime(2026, 12, 3, 10, tzinfo=UTC)
        new = datetime(2026, 12, 3, 11, tzinfo=UTC)
        spot = {"InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX"}
        e.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    {
                        **spot,
                        "AvailabilityZone": "us-east-1a",
                        "SpotPrice": "0.918000",
                        "Timestamp": old,
                    },
                    {
                        **spot,
                        "AvailabilityZone": "us-east-1a",
                        "SpotPrice": "0.941900",
                        "Timestamp": new,
                    },
                ],
                "NextToken": "s1",
            },
            {
                "InstanceTypes": ["p3.2xlarge"],
                "ProductDescriptions": ["Linux/UNIX"],
                "StartTime": ANY,
            },
        )
        e.add_response(
            "describe_spot_price_history",
            {
                "SpotPriceHistory": [
                    {
                        **spot,
                        "AvailabilityZone": "us-east-1b",
                        "SpotPrice": "1.20",
                        "Timestamp": old,
                    }
                ],
                "NextToken": "",
            },
            {
                "InstanceTypes": ["p3.2xlarge"],
                "ProductDescriptions": ["Linux/UNIX"],
                "StartTime": ANY,
                "NextToken": "s1",
            },
        )
        quotes = aws_quotes(pricing, ec2, "us-east-1", ["p3.2xlarge"], NOW)
    got = {(q.market, q.zone): q.usd_per_hour for q in quotes}
    assert got == {
        (Market.ON_DEMAND, ""): Decimal("3.06"),
        (Market.SPOT, "use1-az6"): Decimal("0.941900"),  # the newest of us-east-1a, as its id
        (Market.SPOT, "use1-az1"): Decimal("1.20"),
    }
    assert next(q for q in quotes if q.zone == "use1-az6").observed_at == new


# -- budgeteer catalog refresh, end to end -------------------------------------------------------
def _refresh(
    server: PriceServer, out: Path, *extra: str, env_key: bool = True
) -> subprocess.CompletedProcess[str]:
    env = (
        {**os.environ, "GCP_API_KEY": "k"}
        if env_key
        else {k: v for k, v in os.environ.items() if k != "GCP_API_KEY"}
    )
    return subprocess.run(
        [
            PY,
            "-m",
            "budgeteer",
            "catalog",
            "refresh",
            "--providers",
            "azure,gcp",
            "--regions",
            "eastus,us-central1",
            "--azure-url",
            f"{server.url}/api/retail/prices",
            "--gcp-url",
            f"{server.url}/v1/services/6F81-5844-456A/skus",
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_catalog_refresh_writes_a_catalog_with_sources_and_fetch_times(
    server: PriceServer, tmp_path: Path
) -> None:
    server.pages["/api/retail/prices"] = [_page(AZURE_ITEMS, None)]
    server.pages["/v1/services/6F81-5844-456A/skus"] = [{"skus": GCP_SKUS}]
    out = tmp_path / "fresh"
    run = _refresh(server, out, "--json")
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["providers"]["azure"]["regions"] == ["eastus"]
    assert summary["providers"]["gcp"]["quotes"] > 0
    assert summary["prices_updated"] > 0
    assert any("eastus" in s for s in summary["stale"])  # the Azure types no page priced
    catalog = load_catalog(out)
    by_id = {o.id: o for o in catalog.offerings}
    od = by_id["azure/eastus/*/Standard_NC24ads_A100_v4/on_demand"]
    assert od.usd_per_hour == pytest.approx(3.70)
    assert od.price.source.startswith("azure-retail:meter-")
    assert od.price.observed_at is not None
    a2 = [
        o
        for o in catalog.offerings
        if o.instance_type == "a2-highgpu-1g" and o.region == "us-central1"
    ]
    assert {round(o.usd_per_hour, 6) for o in a2 if o.market is Market.ON_DEMAND} == {3.673385}
    # outside the refreshed regions: the bundled prices and sources, untouched
    bundled = {o.id: o for o in load_catalog(None).offerings}
    untouched = "aws/us-east-1/*/p3.2xlarge/on_demand"
    assert by_id[untouched].usd_per_hour == bundled[untouched].usd_per_hour
    assert by_id[untouched].price.source == bundled[untouched].price.source
    assert (out / "refresh.json").exists()
    assert (out / "gpu_throughput.csv").exists()


def test_a_failing_feed_writes_nothing_and_names_the_problem(
    server: PriceServer, tmp_path: Path
) -> None:
    base = f"{server.url}/api/retail/prices"
    server.pages["/api/retail/prices"] = [_page([], f"{base}?page=2")]
    server.pages["/api/retail/prices?page=2"] = [_page([], f"{base}?page=2")]
    out = tmp_path / "fresh"
    run = _refresh(server, out)
    assert run.returncode == 2
    assert "paging loop" in run.stderr
    assert not (out / "vms.csv").exists()
    missing_key = _refresh(server, tmp_path / "other", env_key=False)
    assert missing_key.returncode == 2
    assert "--gcp-api-key-env" in missing_key.stderr
    assert "GCP_API_KEY is not set" in missing_key.stderr
    unknown = _refresh(server, tmp_path / "x", "--providers", "oracle")
    assert unknown.returncode == 2
    assert "unknown 'oracle'" in unknown.stderr
