"""The offline price catalog: offerings, relative throughput per accelerator, egress prices."""

from budgeteer.catalog.loader import Catalog, bundled_catalog_dir, load_catalog
from budgeteer.domain.egress import EgressRate, EgressTable

__all__ = ["Catalog", "EgressRate", "EgressTable", "bundled_catalog_dir", "load_catalog"]
