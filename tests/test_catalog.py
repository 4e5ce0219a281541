"""The bundled catalog loads; malformed catalogs are rejected naming file, row and column."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from budgeteer.catalog import bundled_catalog_dir, load_catalog
from budgeteer.domain.offering import Market
from budgeteer.errors import CatalogError


def test_bundled_catalog_has_all_three_clouds_and_both_markets() -> None:
    cat = load_catalog()
    assert {o.provider for o in cat.offerings} == {"aws", "gcp", "azure"}
    assert {o.market for o in cat.offerings} == {Market.ON_DEMAND, Market.SPOT}
    assert all(o.accelerator in cat.throughput for o in cat.offerings)
    assert len({o.id for o in cat.offerings}) == len(cat.offerings)
    assert all(o.usd_per_hour >= 0 and o.gpu_memory_gib > 0 for o in cat.offerings)


def test_zones_sharing_an_on_demand_price_merge_into_one_offering() -> None:
    cat = load_catalog()
    g5 = [
        o
        for o in cat.offerings
        if o.instance_type == "g5.16xlarge"
        and o.region == "eu-west-1"
        and o.market is Market.ON_DEMAND
    ]
    assert len(g5) == 1
    assert g5[0].zones == ("euw1-az1", "euw1-az2", "euw1-az3")
    assert g5[0].usd_per_hour == pytest.approx(4.57237)
    spot = [
        o
        for o in cat.offerings
        if o.instance_type == "g5.16xlarge" and o.region == "eu-west-1" and o.market is Market.SPOT
    ]
    assert sorted(o.usd_per_hour for o in spot) == pytest.approx([1.3396, 1.4094, 1.4571])


def test_gpu_only_rows_are_skipped_and_azure_memory_is_filled_in() -> None:
    cat = load_catalog()
    assert not [o for o in cat.offerings if o.provider == "gcp" and o.accelerator == "T4"]
    azure_v100 = [o for o in cat.offerings if o.provider == "azure" and o.accelerator == "V100"]
    assert azure_v100
    assert all(o.gpu_memory_gib == 16 for o in azure_v100)


def test_egress_is_priced_across_volume_bands() -> None:
    egress = load_catalog().egress
    # AWS internet: first GB free, then $0.09/GB
    assert egress.cost_usd("aws/us-east-1", "gcp/us-central1", 500) == pytest.approx(499 * 0.09)
    # AWS inter-region rows are 0.01 (one pair) and 0.02 (others): the estimate uses 0.02
    assert egress.cost_usd("aws/us-east-1", "aws/us-west-2", 500) == pytest.approx(10.0)
    assert egress.cost_usd("aws/us-east-1", "aws/us-east-1", 500) == 0.0
    # GCP internet: 1024 GB at 0.12, then 0.11
    assert egress.cost_usd("gcp/us-central1", "aws/us-east-1", 2048) == pytest.approx(
        1024 * 0.12 + 1024 * 0.11
    )


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    for name in ("vms.csv", "gpu_throughput.csv", "egress.csv"):
        shutil.copy(bundled_catalog_dir() / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, row: int, column: str, value: str) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row - 1].split(",")
    cells[header.index(column)] = value
    lines[row - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("on_demand_usd_per_hour", "-1.5", "must be non-negative"),
        ("spot_usd_per_hour", "cheap", "expected a number"),
        ("accelerator", "Z100", "unknown accelerator 'Z100'"),
        ("accelerator_count", "0.5", "must be a whole number"),
        ("accelerator_count", "0", "must be positive"),
        ("price_basis", "per_gpu", "must be one of"),
        ("on_demand_usd_per_hour", "inf", "must be finite"),
    ],
)
def test_malformed_vms_value_names_file_row_and_column(
    catalog_copy: Path, column: str, value: str, problem: str
) -> None:
    vms = catalog_copy / "vms.csv"
    _edit(vms, 3, column, value)
    with pytest.raises(CatalogError) as err:
        load_catalog(catalog_copy)
    assert err.value.file == str(vms)
    assert err.value.row == 3
    assert err.value.column == column
    assert problem in str(err.value)


def test_missing_column_is_named(catalog_copy: Path) -> None:
    vms = catalog_copy / "vms.csv"
    lines = vms.read_text().splitlines()
    lines[0] = lines[0].replace("spot_usd_per_hour", "spot_price")
    vms.write_text("\n".join(lines) + "\n")
    with pytest.raises(CatalogError, match=r"row 1, column 'spot_usd_per_hour': missing column"):
        load_catalog(catalog_copy)


def test_empty_catalog_is_rejected(catalog_copy: Path) -> None:
    vms = catalog_copy / "vms.csv"
    vms.write_text(vms.read_text().splitlines()[0] + "\n")
    with pytest.raises(CatalogError, match="no usable offering"):
        load_catalog(catalog_copy)


def test_throughput_table_must_be_positive(catalog_copy: Path) -> None:
    tp = catalog_copy / "gpu_throughput.csv"
    _edit(tp, 2, "relative_training_throughput", "0")
    with pytest.raises(CatalogError) as err:
        load_catalog(catalog_copy)
    assert (err.value.row, err.value.column) == (2, "relative_training_throughput")


def test_a_bare_vms_file_uses_the_bundled_tables(tmp_path: Path) -> None:
    vms = tmp_path / "mine.csv"
    vms.write_text(
        "provider,region,zones,instance_type,accelerator,accelerator_count,vcpus,memory_gib,"
        "gpu_memory_gib,on_demand_usd_per_hour,spot_usd_per_hour,price_basis,max_instances,"
        "on_prem_usd_per_hour\n"
        "onprem,dc1,,dgx-a100,A100,8,128,1024,40,,,instance,4,6.5\n"
    )
    cat = load_catalog(vms)
    assert len(cat.offerings) == 1
    only = cat.offerings[0]
    assert (only.market, only.max_instances, only.usd_per_hour) == (Market.ON_PREM, 4, 6.5)
    assert cat.throughput["A100"] == 1.0


def test_missing_catalog_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="file not found"):
        load_catalog(tmp_path / "nope.csv")
