"""The service: ``budgeteer serve`` (API + scheduler loop), its composition root (wiring) and
webhooks. The scheduler itself lives in :mod:`budgeteer.scheduler`."""
