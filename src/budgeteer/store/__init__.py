"""Durable state: the ``Store`` port, an in-memory reference store and the SQL store (SQLite or
PostgreSQL through SQLAlchemy, schema by Alembic migrations)."""

from budgeteer.store.base import (
    AlreadyExists,
    ApiToken,
    Attempt,
    IdempotencyConflict,
    JobFilter,
    LedgerEntry,
    Move,
    NotFound,
    OfferingBackoff,
    PricePoint,
    ProgressReport,
    Store,
    Submission,
    SubmitRequest,
    UnknownJob,
    WebhookDelivery,
    WebSession,
)
from budgeteer.store.memory import MemoryStore
from budgeteer.store.records import PoolCharge, SignalRecord, SpotDecisionRecord
from budgeteer.store.sql import SqlStore

__all__ = [
    "AlreadyExists",
    "ApiToken",
    "Attempt",
    "IdempotencyConflict",
    "JobFilter",
    "LedgerEntry",
    "MemoryStore",
    "Move",
    "NotFound",
    "OfferingBackoff",
    "PoolCharge",
    "PricePoint",
    "ProgressReport",
    "SignalRecord",
    "SpotDecisionRecord",
    "SqlStore",
    "Store",
    "Submission",
    "SubmitRequest",
    "UnknownJob",
    "WebSession",
    "WebhookDelivery",
]
