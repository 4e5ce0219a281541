"""Submit a job or a pipeline to budgeteer and wait for it, deferring to the triggerer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator

from budgeteer.client import ApiError
from budgeteer.integrations.airflow.hooks import BudgeteerHook
from budgeteer.integrations.airflow.triggers import BudgeteerJobTrigger
from budgeteer.integrations.common import (
    Ended,
    JobsDidNotSucceed,
    idempotency_key,
    outcome,
    submit,
    wait,
)


class BudgeteerJobOperator(BaseOperator):
    """Submits ``spec`` — one job's spec, or a pipeline ``{name, jobs: [...]}`` — and succeeds
    when every job it created succeeded; otherwise fails with each job's state and reason.

    The submission's idempotency key is the task instance's identity (DAG, run, task, map
    index, try), so a task that is retried after a crash of its worker finds its jobs instead of
    queuing new ones, while an Airflow retry of a failed task (a new try) submits again.
    ``deferrable`` (the default) frees the worker slot while the jobs run: the triggerer polls
    every ``poll_interval`` seconds. Returns (XCom) the jobs as ``[{job_id, name, state, reason,
    cost_usd}]``. ``spec`` is templated.
    """

    template_fields: Sequence[str] = ("spec",)
    ui_color = "#d9f2e6"

    def __init__(
        self,
        *,
        spec: Mapping[str, Any],
        budgeteer_conn_id: str = BudgeteerHook.default_conn_name,
        deferrable: bool = True,
        poll_interval: float = 10.0,
        wait_timeout: timedelta = timedelta(days=7),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.budgeteer_conn_id = budgeteer_conn_id
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout
        self._job_ids: list[str] = []

    def execute(self, context: Any) -> list[dict[str, Any]]:
        """Submit; then defer (or poll here when not deferrable)."""
        ti = context["ti"]
        key = idempotency_key(
            "airflow", ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number
        )
        hook = BudgeteerHook(self.budgeteer_conn_id)
        with hook.get_conn() as client:
            try:
                self._job_ids = submit(client, dict(self.spec), key)
            except ApiError as exc:
                fields = "; ".join(f"{e['field']}: {e['problem']}" for e in exc.errors)
                raise AirflowException(f"budgeteer refused the spec: {fields or exc}") from exc
            self.log.info("submitted to budgeteer: %s", ", ".join(self._job_ids))
            if not self.deferrable:
                ended = wait(
                    client, self._job_ids, self.wait_timeout.total_seconds(), self.poll_interval
                )
                return self._finish(ended)
        self.defer(
            trigger=BudgeteerJobTrigger(self._job_ids, self.budgeteer_conn_id, self.poll_interval),
            method_name="execute_complete",
            timeout=self.wait_timeout,
        )
        raise AssertionError("defer() raises TaskDeferred; it does not return")

    def execute_complete(self, context: Any, event: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Back from the trigger: succeed, or fail with the jobs' reasons."""
        if event.get("status") != "ended":
            raise AirflowException(f"budgeteer: {event.get('message', event)}")
        return self._finish([Ended.from_dict(d) for d in event["jobs"]])

    def _finish(self, ended: Sequence[Ended]) -> list[dict[str, Any]]:
        try:
            outcome(ended)
        except JobsDidNotSucceed as exc:
            raise AirflowException(f"budgeteer: {exc}") from exc
        for e in ended:
            self.log.info("%s cost $%s", e.describe(), e.cost_usd)
        return [e.as_dict() for e in ended]

    def on_kill(self) -> None:
        """The task was killed while polling here: cancel its jobs."""
        if not self._job_ids:
            return
        with BudgeteerHook(self.budgeteer_conn_id).get_conn() as client:
            for job_id in self._job_ids:
                try:
                    client.cancel(job_id)
                except ApiError as exc:
                    self.log.warning("could not cancel %s: %s", job_id, exc)
