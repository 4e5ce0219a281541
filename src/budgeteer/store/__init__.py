"""Durable state: the ``Store`` port, an in-memory reference store and the SQL store (SQLite or
PostgreSQL through SQLAlchemy, schema by Alembic migrations)."""

from budgeteer.store.base import (
    Attempt,
    IdempotencyConflict,
    LedgerEntry,
    Store,
    Submission,
    UnknownJob,
)
from budgeteer.store.memory import MemoryStore
from budgeteer.store.sql import SqlStore

__all__ = [
    "Attempt",
    "IdempotencyConflict",
    "LedgerEntry",
    "MemoryStore",
    "SqlStore",
    "Store",
    "Submission",
    "UnknownJob",
]
