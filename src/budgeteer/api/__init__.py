"""The REST API (FastAPI): see :mod:`budgeteer.api.app`."""

from budgeteer.api.app import create_app
from budgeteer.api.context import ApiContext

__all__ = ["ApiContext", "create_app"]
