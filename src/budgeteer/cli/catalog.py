"""``budgeteer catalog refresh``: the catalog's shapes priced again from the clouds' price APIs
(:mod:`budgeteer.catalog.feeds`), written as a catalog in the bundled schema with each price's
source and fetch time."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from budgeteer.catalog import bundled_catalog_dir, load_catalog
from budgeteer.catalog.feeds import AZURE_URL, GCP_URL
from budgeteer.catalog.live import FeedSettings, fetch_quotes
from budgeteer.catalog.quotes import FeedError, apply_quotes
from budgeteer.cli import app, comma_names, fail
from budgeteer.errors import BudgeteerError, SpecError

catalog_app = typer.Typer(help="The price catalog.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")

PROVIDERS = ("aws", "azure", "gcp")
#: Columns a refreshed ``vms.csv`` adds to the bundled ones.
SOURCE_COLUMNS = ("on_demand_source", "spot_source", "observed_at")


@catalog_app.command("refresh")
def refresh_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the refreshed catalog.")],
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", help="The catalog whose shapes are priced (default: bundled)."),
    ] = None,
    providers: Annotated[
        str, typer.Option("--providers", help="Comma-separated: aws, azure, gcp.")
    ] = "aws,azure,gcp",
    regions: Annotated[
        str | None,
        typer.Option("--regions", help="Comma-separated; default: every region of the catalog."),
    ] = None,
    azure_url: Annotated[str, typer.Option("--azure-url", help="The Retail Prices API.")] = (
        AZURE_URL
    ),
    gcp_url: Annotated[str, typer.Option("--gcp-url", help="Compute Engine's SKUs.")] = GCP_URL,
    gcp_key_env: Annotated[
        str, typer.Option("--gcp-api-key-env", help="The variable holding the GCP API key.")
    ] = "GCP_API_KEY",
    aws_endpoint: Annotated[
        str | None, typer.Option("--aws-endpoint", help="Another endpoint for AWS's APIs.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The summary as JSON.")] = False,
) -> None:
    """Price the catalog's instance types again from AWS, Azure and GCP; write the catalog to
    ``--out`` only when every feed answered (nothing is half-written)."""
    try:
        summary = refresh(
            catalog or bundled_catalog_dir(),
            out,
            _names("--providers", providers, PROVIDERS),
            None if regions is None else _names("--regions", regions, None),
            azure_url=azure_url,
            gcp_url=gcp_url,
            gcp_key=os.environ.get(gcp_key_env),
            gcp_key_env=gcp_key_env,
            aws_endpoint=aws_endpoint,
        )
    except BudgeteerError as exc:
        fail(exc)
        return
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    table = Table(title=f"catalog refreshed → {out}")
    for column in ("provider", "regions", "quotes", "retries"):
        table.add_column(column)
    for name, feed in summary["providers"].items():
        table.add_row(name, ", ".join(feed["regions"]), str(feed["quotes"]), str(feed["retries"]))
    console = Console()
    console.print(table)
    console.print(
        f"{summary['prices_updated']} prices updated; {len(summary['stale'])} rows kept at "
        "their old price (no quote)"
    )


def _names(option: str, text: str, allowed: Sequence[str] | None) -> list[str]:
    names = comma_names(text)
    if not names:
        raise SpecError(option, "give at least one")
    if allowed is not None:
        for n in names:
            if n not in allowed:
                raise SpecError(option, f"unknown {n!r}; one of {', '.join(allowed)}")
    return names


def refresh(
    catalog: Path,
    out: Path,
    providers: Sequence[str],
    regions: Sequence[str] | None,
    *,
    azure_url: str = AZURE_URL,
    gcp_url: str = GCP_URL,
    gcp_key: str | None = None,
    gcp_key_env: str = "GCP_API_KEY",
    aws_endpoint: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Fetch, fold into ``catalog``'s rows, check the result loads, then write it to ``out``;
    returns the summary (also written as ``out/refresh.json``)."""
    offerings = load_catalog(catalog).offerings  # the input is a catalog
    vms = catalog / "vms.csv"
    with vms.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        columns = list(reader.fieldnames or [])
        rows = list(reader)
    fetched_at = now or datetime.now(UTC)
    if "gcp" in providers and not gcp_key:
        raise SpecError("--gcp-api-key-env", f"{gcp_key_env} is not set (the GCP API key)")
    feeds = FeedSettings(azure_url, gcp_url, gcp_key, aws_endpoint)
    quotes, summary_of = fetch_quotes(offerings, providers, regions, feeds, fetched_at)
    scope = {(p, r) for p, feed in summary_of.items() for r in feed.regions}
    done = apply_quotes(rows, quotes, scope)
    summary = {
        "fetched_at": fetched_at.isoformat(),
        "source": str(catalog),
        "providers": {p: dataclasses.asdict(feed) for p, feed in summary_of.items()},
        "prices_updated": done.updated,
        "stale": done.stale,
    }
    _write(catalog, out, columns, done.rows, summary)
    return summary


def _write(
    catalog: Path,
    out: Path,
    columns: list[str],
    rows: list[dict[str, str]],
    summary: dict[str, Any],
) -> None:
    """Write into a temporary folder beside ``out``, check that it loads, then move each file
    into place (no half-written catalog)."""
    out.mkdir(parents=True, exist_ok=True)
    header = columns + [c for c in SOURCE_COLUMNS if c not in columns]
    with tempfile.TemporaryDirectory(dir=out, prefix=".refresh-") as tmp:
        staging = Path(tmp)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in header})
        (staging / "vms.csv").write_text(buf.getvalue(), encoding="utf-8")
        for name in ("gpu_throughput.csv", "egress.csv"):
            if (catalog / name).exists():
                shutil.copyfile(catalog / name, staging / name)
        (staging / "refresh.json").write_text(json.dumps(summary, indent=2) + "\n")
        try:
            load_catalog(staging)
        except BudgeteerError as exc:
            raise FeedError("catalog", "the refreshed vms.csv", str(exc)) from None
        for path in staging.iterdir():
            os.replace(path, out / path.name)
