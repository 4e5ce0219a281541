"""``budgeteer serve``: the API, the scheduler loop and the supervisor in one process.

The loop runs in a background thread: it waits for leadership (a second replica on the same
PostgreSQL serves the API and waits), then runs cycles on its interval and on events, timing
each into ``budgeteer_scheduler_cycle_seconds``. On SIGTERM/SIGINT uvicorn stops taking
requests, then the loop stops admitting and sends every running attempt the notice; the attempts
checkpoint, their ends are recorded, and their jobs are queued to resume on the next start.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import secrets
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from budgeteer.api import ApiContext, create_app
from budgeteer.api.app import cycle_histogram
from budgeteer.api.auth import job_token
from budgeteer.scheduler import CycleReport, Driver, Scheduler
from budgeteer.scheduler.driver import log_report
from budgeteer.service.webhooks import Notifier
from budgeteer.service.wiring import Service
from budgeteer.store.leader import LeaderLock

log = logging.getLogger("budgeteer.serve")
#: Real seconds between webhook passes (queue what is due, send it).
WEBHOOK_PERIOD_SECONDS = 2.0
#: Real seconds between the end of a cycle and the next one, whatever happens (debounce).
MIN_CYCLE_GAP_SECONDS = 0.5


class JsonFormatter(logging.Formatter):
    """One JSON object per log line, with the record's extra fields (``job_id`` …)."""

    _SKIP = frozenset(vars(logging.makeLogRecord({})))

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON."""
        out = {
            "at": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out |= {k: v for k, v in vars(record).items() if k not in self._SKIP}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(json_lines: bool) -> None:
    """Log to stderr, as JSON lines when asked."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def secret_key(workdir: Path) -> bytes:
    """The key that signs job tokens, created once in the work folder (mode 0600)."""
    path = workdir / "secret-key"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".secret-key.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        os.replace(tmp, path)
    return bytes.fromhex(path.read_text().strip())


class LoopThread(threading.Thread):
    """The scheduler loop of ``serve``: the shared :class:`~budgeteer.scheduler.Driver` in a
    background thread, timing each cycle into ``budgeteer_scheduler_cycle_seconds``."""

    def __init__(
        self, sched: Scheduler, lock: LeaderLock, interval_seconds: float, app: FastAPI
    ) -> None:
        super().__init__(name="budgeteer-loop", daemon=True)
        self.sched = sched

        def on_report(report: CycleReport, seconds: float) -> None:
            cycle_histogram(app).observe(seconds)
            log_report(report, seconds)

        self.driver = Driver(
            sched,
            lock,
            interval_seconds,
            min_gap_seconds=MIN_CYCLE_GAP_SECONDS,
            on_report=on_report,
        )
        self.stopping = self.driver.stopping

    def ready(self) -> tuple[bool, str]:
        """Readiness of the loop (see :meth:`~budgeteer.scheduler.Driver.ready`)."""
        if not self.is_alive():
            return True, "no scheduler in this process"
        return self.driver.ready()

    @property
    def leading(self) -> bool:
        """Whether this replica runs the scheduler now."""
        return self.driver.leading

    def run(self) -> None:
        """Lead, cycle, and on stop shut down gracefully."""
        self.driver.run()


class WebhookThread(threading.Thread):
    """Queues and sends webhooks every ``WEBHOOK_PERIOD_SECONDS`` while this replica leads."""

    def __init__(self, notifier: Notifier, loop: LoopThread) -> None:
        super().__init__(name="budgeteer-webhooks", daemon=True)
        self.notifier = notifier
        self.loop = loop

    def run(self) -> None:
        """Until the loop stops."""
        while not self.loop.stopping.wait(WEBHOOK_PERIOD_SECONDS):
            if not self.loop.leading:
                continue
            try:
                self.notifier.scan()
                self.notifier.deliver()
            except Exception:  # the top of this loop: log, try again next period
                log.exception("webhook pass failed")


def build_app(
    svc: Service, admin_token: str, *, scheduler: bool = True
) -> tuple[FastAPI, LoopThread]:
    """The API app over ``svc`` and the loop thread its lifespan starts and stops (not
    started with ``scheduler`` False: an API-only replica beside a leader elsewhere)."""
    cfg = svc.config
    workdir = svc.workdir()
    key = secret_key(workdir)
    scheme = "https" if cfg.api.tls_cert else "http"
    public_url = cfg.api.public_url or f"{scheme}://{cfg.api.host}:{cfg.api.port}"

    def job_env(job_id: str) -> dict[str, str]:
        return {"BUDGETEER_API_URL": public_url, "BUDGETEER_JOB_TOKEN": job_token(key, job_id)}

    svc.seed_budgets()
    sched = svc.scheduler(job_env=job_env, fixed_budgets=False)
    lock = svc.store.leader_lock()
    holder: dict[str, LoopThread] = {}
    ctx = ApiContext(
        store=svc.store,
        catalog=svc.catalog,
        clock=svc.clock,
        snapshot=sched.snapshot,
        admin_token=admin_token,
        secret_key=key,
        policy=sched.policy,
        max_body_bytes=cfg.api.max_body_bytes,
        is_leader=lambda: holder["loop"].leading,
        loop_ready=lambda: holder["loop"].ready(),  # noqa: PLW0108 - the thread is made below
        quarantined=lambda: sched.quarantined,
        webhook_allow_private=cfg.api.webhook_allow_private,
        metrics_public=cfg.api.metrics_public,
        allowed_commands=tuple(tuple(c) for c in cfg.api.allowed_commands),
        run_any_command=cfg.api.run_any_command,
        metrics_token=os.environ.get("BUDGETEER_METRICS_TOKEN") or cfg.api.metrics_token,
        checkpoint_root=sched.checkpoint_root,
        max_price_age_seconds=cfg.prices.max_age_seconds if cfg.prices else 6 * 3600.0,
        triggers=svc.trigger_policy(),
    )

    refresher = svc.refresher(sched.catalog.offerings) if scheduler else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if scheduler:
            holder["loop"].start()
            WebhookThread(notifier, holder["loop"]).start()
        if refresher is not None:  # live prices: fetched in the background, kept in the store
            threading.Thread(target=refresher.run, name="price-refresher", daemon=True).start()
        yield
        if refresher is not None:
            refresher.stop()
        if scheduler:
            holder["loop"].stopping.set()
            holder["loop"].join()

    notifier = Notifier(
        svc.store, svc.clock, sched.policy, allow_private=cfg.api.webhook_allow_private
    )
    app = create_app(ctx)
    app.router.lifespan_context = lifespan
    holder["loop"] = LoopThread(sched, lock, cfg.interval_seconds, app)
    return app, holder["loop"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it is reachable from elsewhere
        return False


def resolve_admin_token(svc: Service) -> tuple[str, bool]:
    """The admin token (environment, then config) and whether it was made up just now."""
    token = os.environ.get("BUDGETEER_ADMIN_TOKEN") or svc.config.api.admin_token
    if token:
        return token, False
    return "bga_" + secrets.token_urlsafe(24), True


def serve(
    svc: Service,
    host: str,
    port: int,
    *,
    scheduler: bool = True,
    workers: int = 1,
    config_path: Path | None = None,
) -> None:
    """Run the API (and, unless ``scheduler`` is False, the loop) until SIGTERM/SIGINT.

    With ``workers`` > 1, uvicorn runs that many processes, each built from the config by
    :func:`app_from_env`; they share the store, and the leader lock lets exactly one of them
    run the scheduler (the others serve the API and stand by)."""
    setup_logging(svc.config.api.log_json)
    admin_token, generated = resolve_admin_token(svc)
    if generated:
        print(
            f"admin token (set BUDGETEER_ADMIN_TOKEN to choose one): {admin_token}", file=sys.stderr
        )
    api = svc.config.api
    cert = str(svc.path(api.tls_cert)) if api.tls_cert is not None else None
    key = str(svc.path(api.tls_key)) if api.tls_key is not None else None
    tls = cert is not None
    scheme = "https" if tls else "http"
    log.info(
        "serving on %s://%s:%d (dashboard at /, API at /v1, metrics at /metrics)",
        scheme,
        host,
        port,
    )
    if not tls and not is_loopback(host):
        log.warning(
            "serving on %s without TLS: tokens and session cookies cross the network in clear "
            "text; pass --tls-cert/--tls-key (api.tls_cert/tls_key) or put a TLS proxy in front",
            host,
        )
    if api.run_any_command:
        log.warning(
            "api.run_any_command is on: any team token can run any command on this machine "
            "(as the jobs' user); prefer api.allowed_commands"
        )
    if svc.config.api.metrics_public:
        log.warning(
            "api.metrics_public is on: /metrics shows every team's spend and budget limits to "
            "anyone who can reach this port; keep it inside a private network"
        )
    if workers > 1:
        os.environ |= {
            "BUDGETEER_ADMIN_TOKEN": admin_token,
            "BUDGETEER_CONFIG": str(config_path.resolve()) if config_path else "",
            "BUDGETEER_SERVE_HOST": host,
            "BUDGETEER_SERVE_PORT": str(port),
            "BUDGETEER_SERVE_SCHEDULER": "1" if scheduler else "0",
        }
        uvicorn.run(
            "budgeteer.service.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=None,
            access_log=False,
            ssl_certfile=cert,
            ssl_keyfile=key,
        )
        return
    app, _ = build_app(svc, admin_token, scheduler=scheduler)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )
    uvicorn.Server(config).run()


def app_from_env() -> FastAPI:
    """The app of one worker process of ``serve --workers N`` (its settings come from the
    environment the parent set)."""
    from budgeteer.config import load_config  # noqa: PLC0415 - only worker processes need it
    from budgeteer.service.wiring import build  # noqa: PLC0415

    path = os.environ.get("BUDGETEER_CONFIG") or None
    cfg, root = load_config(Path(path) if path else None)
    api = cfg.api.model_copy(
        update={
            "host": os.environ["BUDGETEER_SERVE_HOST"],
            "port": int(os.environ["BUDGETEER_SERVE_PORT"]),
        }
    )
    svc = build(cfg.model_copy(update={"api": api}), root)
    setup_logging(cfg.api.log_json)
    scheduler = os.environ.get("BUDGETEER_SERVE_SCHEDULER", "1") == "1"
    app, _ = build_app(svc, os.environ["BUDGETEER_ADMIN_TOKEN"], scheduler=scheduler)
    return app
