"""Polls a budgeteer service until every job of a submission ended (in the triggerer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
from airflow.triggers.base import BaseTrigger, TriggerEvent

from budgeteer.client import ApiError
from budgeteer.integrations.common import settled


class BudgeteerJobTrigger(BaseTrigger):
    """Fires once every job in ``job_ids`` is terminal, with ``{"status": "ended", "jobs":
    [Ended.as_dict() ...]}``; ``{"status": "error", "message"}`` when the service refuses (a
    token revoked, a job not visible). Transient errors (5xx, network) are retried."""

    def __init__(
        self, job_ids: list[str], budgeteer_conn_id: str, poll_interval: float = 10.0
    ) -> None:
        super().__init__()
        self.job_ids = list(job_ids)
        self.budgeteer_conn_id = budgeteer_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and arguments (stored by Airflow, so no token here: the conn id)."""
        return (
            "budgeteer.integrations.airflow.triggers.BudgeteerJobTrigger",
            {
                "job_ids": self.job_ids,
                "budgeteer_conn_id": self.budgeteer_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll every ``poll_interval`` seconds; yield one event and stop."""
        from budgeteer.integrations.airflow.hooks import BudgeteerHook  # noqa: PLC0415

        client = await BudgeteerHook(self.budgeteer_conn_id).get_async_conn()
        try:
            while True:
                try:
                    ended = settled([await client.get(j) for j in self.job_ids])
                except ApiError as exc:
                    if not exc.transient:
                        yield TriggerEvent({"status": "error", "message": str(exc)})
                        return
                    self.log.warning("budgeteer answered %s; polling again", exc)
                    ended = None
                except httpx.TransportError as exc:
                    self.log.warning("budgeteer unreachable (%s); polling again", exc)
                    ended = None
                if ended is not None:
                    yield TriggerEvent({"status": "ended", "jobs": [e.as_dict() for e in ended]})
                    return
                await asyncio.sleep(self.poll_interval)
        finally:
            await client.close()
