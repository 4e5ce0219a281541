"""The connection to a budgeteer service: ``host`` is its URL (``https://budgeteer.internal``,
or a host with ``port`` and ``schema`` http/https), ``password`` the team token."""

from __future__ import annotations

from typing import Any

import httpx
from airflow.exceptions import AirflowException
from airflow.sdk import BaseHook

from budgeteer.client import ApiError, AsyncClient, Client


class BudgeteerHook(BaseHook):
    """Clients of the service named by an Airflow connection (type ``budgeteer``)."""

    conn_name_attr = "budgeteer_conn_id"
    default_conn_name = "budgeteer_default"
    conn_type = "budgeteer"
    hook_name = "budgeteer"

    def __init__(self, budgeteer_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.budgeteer_conn_id = budgeteer_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form: a URL and a token."""
        return {
            "hidden_fields": ["login", "extra"],
            "relabeling": {"host": "Service URL", "password": "Token", "schema": "Scheme"},
            "placeholders": {"host": "https://budgeteer.internal:8080", "schema": "https"},
        }

    def endpoint(self, conn: Any) -> tuple[str, str]:
        """``(url, token)`` of a connection; an error naming the missing field."""
        if not conn.host:
            raise AirflowException(f"connection {self.budgeteer_conn_id!r}: host is empty")
        if not conn.password:
            raise AirflowException(
                f"connection {self.budgeteer_conn_id!r}: password (the budgeteer token) is empty"
            )
        url = str(conn.host)
        if "://" not in url:
            url = f"{conn.schema or 'http'}://{url}"
            if conn.port:
                url = f"{url}:{conn.port}"
        return url.rstrip("/"), str(conn.password)

    def get_conn(self) -> Client:
        """A synchronous client (close it, or use it in ``with``)."""
        return Client(*self.endpoint(self.get_connection(self.budgeteer_conn_id)))

    async def get_async_conn(self) -> AsyncClient:
        """An asynchronous client, for triggers."""
        conn = await self.aget_connection(self.budgeteer_conn_id)
        return AsyncClient(*self.endpoint(conn))

    def test_connection(self) -> tuple[bool, str]:
        """The UI's test button: the budgets the token sees."""
        try:
            with self.get_conn() as client:
                n = len(client.budgets())
        except (ApiError, AirflowException, httpx.HTTPError) as exc:
            return False, str(exc)
        return True, f"connected; the token sees {n} budget(s)"
