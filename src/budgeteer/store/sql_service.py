"""The SQL store's tables for the service around the scheduler: API tokens, budgets kept
through the API, progress reports and the webhook outbox (a mixin of
:class:`~budgeteer.store.sql.SqlStore`, which supplies the engine and transactions)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from budgeteer.core.speed import Speed
from budgeteer.core.spot.estimate import MarketHistory, Period
from budgeteer.core.spot.replay import Mode
from budgeteer.domain.job import Job, JobState
from budgeteer.store import schema as t
from budgeteer.store.base import (
    AlreadyExists,
    ApiToken,
    JobFilter,
    NotFound,
    OfferingBackoff,
    PricePoint,
    ProgressReport,
    UnknownJob,
    WebhookDelivery,
    WebSession,
)
from budgeteer.store.codec import job_from_dict
from budgeteer.store.records import SignalRecord, SpotDecisionRecord
from budgeteer.store.sql_support import (
    situation_from_json,
    situation_json,
    token_row,
    webhook_row,
)


class ServiceTables:
    """Tokens, budgets, progress and webhooks (see the module docstring)."""

    engine: Engine  # both supplied by SqlStore
    _tx: Callable[[], contextlib.AbstractContextManager[Connection]]

    # -- API records ------------------------------------------------------------------------
    def list_jobs(self, where: JobFilter) -> list[Job]:
        """See :class:`~budgeteer.store.base.Store`."""
        j = t.jobs
        query = sa.select(j).order_by(j.c.seq, j.c.id).limit(where.limit)
        if where.teams is not None:
            query = query.where(j.c.team.in_(sorted(where.teams)))
        if where.states is not None:
            query = query.where(j.c.state.in_(sorted(s.value for s in where.states)))
        if where.tier is not None:
            query = query.where(j.c.tier == where.tier.name)
        if where.after is not None:
            seq, last = where.after
            query = query.where((j.c.seq > seq) | ((j.c.seq == seq) & (j.c.id > last)))
        with self.engine.connect() as conn:
            return [job_from_dict(r.spec, JobState(r.state)) for r in conn.execute(query)]

    def next_seq(self) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            top = conn.execute(sa.select(sa.func.max(t.jobs.c.seq))).scalar_one()
        return 0 if top is None else int(top) + 1

    def add_token(self, token: ApiToken, token_hash: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        try:
            with self._tx() as conn:
                conn.execute(
                    t.api_tokens.insert().values(
                        id=token.id,
                        name=token.name,
                        token_hash=token_hash,
                        teams=list(token.teams),
                        admin=token.admin,
                        created_at=token.created_at,
                        revoked_at=token.revoked_at,
                    )
                )
        except sa.exc.IntegrityError:
            raise AlreadyExists(f"token {token.id!r} exists already") from None

    def token_by_hash(self, token_hash: str) -> ApiToken | None:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.api_tokens).where(t.api_tokens.c.token_hash == token_hash)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else token_row(row)

    def tokens(self) -> list[ApiToken]:
        """See :class:`~budgeteer.store.base.Store`."""
        query = sa.select(t.api_tokens).order_by(t.api_tokens.c.created_at, t.api_tokens.c.id)
        with self.engine.connect() as conn:
            return [token_row(r) for r in conn.execute(query)]

    def revoke_token(self, token_id: str, *, at: datetime) -> ApiToken:
        """See :class:`~budgeteer.store.base.Store`."""
        tok = t.api_tokens
        with self._tx() as conn:
            conn.execute(
                tok.update()
                .where((tok.c.id == token_id) & tok.c.revoked_at.is_(None))
                .values(revoked_at=at)
            )
            row = conn.execute(sa.select(tok).where(tok.c.id == token_id)).first()
        if row is None:
            raise NotFound(f"no token {token_id!r}")
        return token_row(row)

    def add_session(self, session_hash: str, session: WebSession) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        s = t.web_sessions
        with self._tx() as conn:
            conn.execute(s.delete().where(s.c.expires_at <= session.created_at))
            conn.execute(
                s.insert().values(
                    session_hash=session_hash,
                    credential=session.credential,
                    created_at=session.created_at,
                    expires_at=session.expires_at,
                )
            )

    def session(self, session_hash: str) -> WebSession | None:
        """See :class:`~budgeteer.store.base.Store`."""
        s = t.web_sessions
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(s).where(s.c.session_hash == session_hash)).first()
        return None if row is None else WebSession(row.credential, row.created_at, row.expires_at)

    def end_session(self, session_hash: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        s = t.web_sessions
        with self._tx() as conn:
            conn.execute(s.delete().where(s.c.session_hash == session_hash))

    def put_backoff(self, backoff: OfferingBackoff) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        b = t.offering_backoffs
        row = dataclasses.asdict(backoff)
        with self._tx() as conn:
            conn.execute(b.delete().where(b.c.offering_id == backoff.offering_id))
            conn.execute(b.insert().values(**row))

    def clear_backoff(self, offering_id: str) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        b = t.offering_backoffs
        with self._tx() as conn:
            conn.execute(b.delete().where(b.c.offering_id == offering_id))

    def backoffs(self) -> list[OfferingBackoff]:
        """See :class:`~budgeteer.store.base.Store`."""
        b = t.offering_backoffs
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(b).order_by(b.c.offering_id)).all()
        return [
            OfferingBackoff(r.offering_id, r.instances, r.until, r.misses, r.since, r.room_at)
            for r in rows
        ]

    def put_market(self, history: MarketHistory) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        m = t.market_histories
        row = {
            "offering_id": history.offering_id,
            "up": history.up,
            "since": history.since,
            "seen_start": history.seen_start,
            "observations": history.observations,
            "periods": json.dumps([[p.up, p.hours, p.complete] for p in history.periods]),
        }
        with self._tx() as conn:
            conn.execute(m.delete().where(m.c.offering_id == history.offering_id))
            conn.execute(m.insert().values(**row))

    def markets(self) -> list[MarketHistory]:
        """See :class:`~budgeteer.store.base.Store`."""
        m = t.market_histories
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(m).order_by(m.c.offering_id)).all()
        return [
            MarketHistory(
                r.offering_id,
                tuple(Period(bool(u), float(h), bool(c)) for u, h, c in json.loads(r.periods)),
                None if r.up is None else bool(r.up),
                r.since,
                bool(r.seen_start),
                r.observations,
            )
            for r in rows
        ]

    def add_prices(self, points: Sequence[PricePoint]) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        p = t.price_points
        added = 0
        with self._tx() as conn:
            for point in points:
                key = (p.c.offering_id == point.offering_id) & (p.c.at == point.at)
                if conn.execute(sa.select(p.c.at).where(key)).first() is not None:
                    continue
                conn.execute(
                    p.insert().values(
                        offering_id=point.offering_id,
                        at=point.at,
                        usd_per_hour=point.usd_per_hour,
                        source=point.source[:255],
                    )
                )
                added += 1
        return added

    def price_points(
        self, offering_id: str | None = None, since: datetime | None = None
    ) -> list[PricePoint]:
        """See :class:`~budgeteer.store.base.Store`."""
        p = t.price_points
        query = sa.select(p)
        if offering_id is not None:
            query = query.where(p.c.offering_id == offering_id)
        if since is not None:  # what follows `since`, and the point in force at it
            latest = (
                sa.select(p.c.offering_id, sa.func.max(p.c.at).label("at"))
                .where(p.c.at <= since)
                .group_by(p.c.offering_id)
                .subquery()
            )
            in_force = sa.exists().where(
                (latest.c.offering_id == p.c.offering_id) & (latest.c.at == p.c.at)
            )
            query = query.where((p.c.at > since) | in_force)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(p.c.offering_id, p.c.at)).all()
        return [PricePoint(r.offering_id, r.at, Decimal(r.usd_per_hour), r.source) for r in rows]

    def add_signal(self, record: SignalRecord) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        row = {
            "model": record.model,
            "team": record.team,
            "kind": record.kind,
            "severity": record.severity,
            "action": record.action,
            "job_id": record.job_id,
            "at": record.at,
            "reason": record.reason,
            "statistics": json.dumps([list(s) for s in record.statistics]),
        }
        return self._append(t.signals, row)

    def signals(self, model: str | None = None, limit: int | None = 100) -> list[SignalRecord]:
        """See :class:`~budgeteer.store.base.Store`."""
        rows = self._newest(t.signals, t.signals.c.model, model, limit)
        return [
            SignalRecord(
                r.model,
                r.team,
                r.kind,
                r.severity,
                r.action,
                r.job_id,
                r.at,
                r.reason,
                tuple(
                    (str(f), float(p), None if k is None else float(k), float(j))
                    for f, p, k, j in json.loads(r.statistics)
                ),
                r.id,
            )
            for r in rows
        ]

    def _append(self, table: sa.Table, row: Mapping[str, Any]) -> int:
        """Insert one row of an append-only record table; its new ``id``."""
        with self._tx() as conn:
            key = conn.execute(table.insert().values(**row)).inserted_primary_key
            assert key is not None
            return int(key[0])

    def _newest(
        self, table: sa.Table, column: sa.Column[Any], value: str | None, limit: int | None
    ) -> Sequence[sa.Row[Any]]:
        """Rows of an append-only record table (integer ``id``), newest first: those whose
        ``column`` is ``value`` (all when ``None``), at most ``limit``."""
        query = sa.select(table).order_by(table.c.id.desc())
        if value is not None:
            query = query.where(column == value)
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            return conn.execute(query).all()

    def add_spot_decision(self, record: SpotDecisionRecord) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        row = {
            "job_id": record.job_id,
            "attempt_id": record.attempt_id,
            "at": record.at,
            "action": record.action,
            "offering_id": record.offering_id,
            "decided": record.decided.value,
            "safety_net": record.safety_net,
            "situation": situation_json(record.situation),
        }
        return self._append(t.spot_decisions, row)

    def spot_decisions(
        self, job_id: str | None = None, limit: int | None = 100
    ) -> list[SpotDecisionRecord]:
        """See :class:`~budgeteer.store.base.Store`."""
        rows = self._newest(t.spot_decisions, t.spot_decisions.c.job_id, job_id, limit)
        return [
            SpotDecisionRecord(
                r.job_id,
                r.attempt_id,
                r.at,
                r.action,
                r.offering_id,
                Mode(r.decided),
                situation_from_json(r.situation),
                r.safety_net,
                r.id,
            )
            for r in rows
        ]

    def put_speed(self, speed: Speed) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        j = t.job_speeds
        key = (j.c.family == speed.family) & (j.c.accelerator == speed.accelerator)
        with self._tx() as conn:
            conn.execute(j.delete().where(key))
            conn.execute(
                j.insert().values(
                    family=speed.family,
                    accelerator=speed.accelerator,
                    factor=speed.factor,
                    runs=speed.runs,
                )
            )

    def speeds(self) -> list[Speed]:
        """See :class:`~budgeteer.store.base.Store`."""
        j = t.job_speeds
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(j).order_by(j.c.family, j.c.accelerator)).all()
        return [Speed(r.family, r.accelerator, float(r.factor), int(r.runs)) for r in rows]

    def put_budget(self, spec: Mapping[str, Any], *, create: bool) -> None:
        """See :class:`~budgeteer.store.base.Store`."""
        budget_id = str(spec["id"])
        b = t.budgets
        with self._tx() as conn:
            exists = conn.execute(sa.select(b.c.id).where(b.c.id == budget_id)).first()
            if create and exists is not None:
                raise AlreadyExists(f"budget {budget_id!r} exists already")
            if not create and exists is None:
                raise NotFound(f"no budget {budget_id!r}")
            if exists is None:
                conn.execute(b.insert().values(id=budget_id, spec=dict(spec)))
            else:
                conn.execute(b.update().where(b.c.id == budget_id).values(spec=dict(spec)))

    def budget_specs(self) -> list[dict[str, Any]]:
        """See :class:`~budgeteer.store.base.Store`."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.budgets.c.spec).order_by(t.budgets.c.id))
            return [dict(r.spec) for r in rows]

    def add_progress(self, job_id: str, record: Mapping[str, Any], *, at: datetime) -> int:
        """See :class:`~budgeteer.store.base.Store`."""
        with self._tx() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            return int(
                conn.execute(
                    t.progress_reports.insert()
                    .values(job_id=job_id, at=at, record=dict(record))
                    .returning(t.progress_reports.c.id)
                ).scalar_one()
            )

    def progress(self, job_id: str, after_id: int = 0) -> list[ProgressReport]:
        """See :class:`~budgeteer.store.base.Store`."""
        p = t.progress_reports
        query = sa.select(p).where((p.c.job_id == job_id) & (p.c.id > after_id)).order_by(p.c.id)
        with self.engine.connect() as conn:
            return [
                ProgressReport(r.id, r.job_id, r.at, dict(r.record)) for r in conn.execute(query)
            ]

    # -- webhook outbox ---------------------------------------------------------------------
    def enqueue_webhook(
        self, job_id: str, kind: str, payload: Mapping[str, Any], *, at: datetime
    ) -> bool:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        with self._tx() as conn:
            if conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.id == job_id)).first() is None:
                raise UnknownJob(f"no job {job_id!r}")
            known = conn.execute(
                sa.select(w.c.kind).where((w.c.job_id == job_id) & (w.c.kind == kind))
            ).first()
            if known is not None:
                return False
            conn.execute(
                w.insert().values(
                    job_id=job_id,
                    kind=kind,
                    payload=dict(payload),
                    attempts=0,
                    created_at=at,
                    next_at=at,
                )
            )
            return True

    def due_webhooks(self, now: datetime, limit: int = 100) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        query = (
            sa.select(w)
            .where(w.c.next_at.is_not(None) & (w.c.next_at <= now))
            .order_by(w.c.next_at, w.c.job_id, w.c.kind)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [webhook_row(r) for r in conn.execute(query)]

    def record_webhook(
        self, job_id: str, kind: str, *, at: datetime, error: str | None, next_at: datetime | None
    ) -> WebhookDelivery:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        match = (w.c.job_id == job_id) & (w.c.kind == kind)
        with self._tx() as conn:
            row = conn.execute(sa.select(w).where(match)).first()
            if row is None:
                raise NotFound(f"no webhook {kind!r} for job {job_id!r}")
            values: dict[str, Any] = {"attempts": row.attempts + 1}
            if error is None:
                values |= {"next_at": None, "delivered_at": at, "last_error": None}
            else:
                values |= {"next_at": next_at, "last_error": error[:2000]}
            conn.execute(w.update().where(match).values(**values))
            row = conn.execute(sa.select(w).where(match)).first()
        return webhook_row(row)

    def webhooks(self, job_id: str) -> list[WebhookDelivery]:
        """See :class:`~budgeteer.store.base.Store`."""
        w = t.webhook_deliveries
        query = sa.select(w).where(w.c.job_id == job_id).order_by(w.c.kind)
        with self.engine.connect() as conn:
            return [webhook_row(r) for r in conn.execute(query)]
