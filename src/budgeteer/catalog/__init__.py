"""The offline price catalog: offerings, relative throughput per accelerator, egress prices."""

from budgeteer.catalog.egress import EgressRate, EgressTable
from budgeteer.catalog.loader import Catalog, bundled_catalog_dir, load_catalog

__all__ = ["Catalog", "EgressRate", "EgressTable", "bundled_catalog_dir", "load_catalog"]
