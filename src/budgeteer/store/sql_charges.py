"""The SQL store's pool charges (:class:`~budgeteer.store.records.PoolCharge`): money pools
spent on instances no job asked for, billed to their teams."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from budgeteer.store import schema as t
from budgeteer.store.records import PoolCharge


class PoolChargeTables:
    """``pool_charges`` on SQLite or PostgreSQL (mixed into
    :class:`~budgeteer.store.sql.SqlStore`)."""

    engine: Engine  # both supplied by SqlStore
    _tx: Callable[[], contextlib.AbstractContextManager[Connection]]

    def add_pool_charge(self, charge: PoolCharge) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        c = t.pool_charges.c
        ids = json.dumps(list(charge.instance_ids))
        key = (
            (c.offering_id == charge.offering_id)
            & (c.team == charge.team)
            & (c.start == charge.start)
            & (c.instance_ids == ids)
        )
        with self._tx() as conn:
            if conn.execute(sa.select(c.start).where(key)).first() is not None:
                return False
            conn.execute(
                t.pool_charges.insert().values(
                    offering_id=charge.offering_id,
                    team=charge.team,
                    start=charge.start,
                    end=charge.end,
                    usd_per_hour=charge.usd_per_hour,
                    amount_usd=charge.amount_usd,
                    price_source=charge.price_source,
                    instance_ids=ids,
                )
            )
            return True

    def pool_charges(self, team: str | None = None) -> list[PoolCharge]:
        """See :class:`~budgeteer.store.base.Store`."""
        c = t.pool_charges.c
        query = sa.select(t.pool_charges).order_by(c.start, c.offering_id, c.team, c.instance_ids)
        if team is not None:
            query = query.where(c.team == team)
        with self.engine.connect() as conn:
            return [
                PoolCharge(
                    r.offering_id,
                    r.team,
                    r.start,
                    r.end,
                    r.usd_per_hour,
                    r.amount_usd,
                    r.price_source,
                    tuple(str(i) for i in json.loads(r.instance_ids)),
                )
                for r in conn.execute(query)
            ]

    def pool_charge_count(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            count = conn.execute(sa.select(sa.func.count()).select_from(t.pool_charges))
            return int(count.scalar_one())
