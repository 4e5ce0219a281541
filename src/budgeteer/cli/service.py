"""``budgeteer serve | run | submit | status | cancel | ledger``: the service, and the loop and
the store from the shell (these work directly on the store named in the config, for operators on
the service's machine; remote callers use the API or :mod:`budgeteer.client`)."""

from __future__ import annotations

import contextlib
import os
from decimal import Decimal
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from budgeteer.cli import app, fail
from budgeteer.clock import SystemClock
from budgeteer.config import ApiConfig, load_config
from budgeteer.display import usd, when
from budgeteer.errors import BudgeteerError, SpecError
from budgeteer.intake import submit_specs
from budgeteer.ledger.billing import is_idle
from budgeteer.ledger.waste import spend_by_job, wasted_jobs
from budgeteer.scheduler import CycleReport, Driver, Scheduler
from budgeteer.service.wiring import Service, build
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.files import converted, read_job_specs

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Service config file (YAML, TOML or JSON). Default: $BUDGETEER_CONFIG, else "
        "budgeteer.yaml in this folder.",
    ),
]


#: Config files looked for in the current folder when neither --config nor BUDGETEER_CONFIG is
#: given.
CONFIG_NAMES = ("budgeteer.yaml", "budgeteer.yml", "budgeteer.toml", "budgeteer.json")


def find_config(config: Path | None) -> Path:
    """The config file: ``--config``, else ``BUDGETEER_CONFIG``, else one of
    :data:`CONFIG_NAMES` in the current folder. Without any, say so (exit 2) rather than open
    a new, empty store where the operator stands ("my jobs vanished")."""
    if config is not None:
        return config
    env = os.environ.get("BUDGETEER_CONFIG")
    if env:
        return Path(env)
    for name in CONFIG_NAMES:
        if Path(name).is_file():
            return Path(name)
    raise SpecError(
        "--config",
        "no configuration: pass --config FILE, set BUDGETEER_CONFIG, or put budgeteer.yaml "
        "in this folder (it names the store to use)",
    )


def _service(config: Path | None) -> Service:
    cfg, root = load_config(find_config(config))
    return build(cfg, root)


@app.command("submit")
def submit(jobs: Path, config: ConfigOption = None) -> None:
    """Submit the jobs of a file (idempotent: the same file content is accepted once)."""
    try:
        svc = _service(config)
        read = read_job_specs(jobs)
        key = read.digest
        result = converted(
            read,
            lambda: submit_specs(
                svc.store,
                read.specs,
                now=svc.clock.now(),
                known_accelerators=list(svc.catalog.throughput),
                existing=read.invalid_names,
                idempotency_key=f"file:{key}",
                request_hash=key,
                source=read.source,
                positions=read.positions,
                require_command=True,  # the sandbox runs each job's command
            ),
        )
    except BudgeteerError as exc:
        fail(exc)
        return
    verb = "already submitted" if result.replayed else "submitted"
    for job_id in result.job_ids:
        typer.echo(f"{verb}: {job_id}")


@app.command("run")
def run(
    config: ConfigOption = None,
    cycles: Annotated[
        int | None, typer.Option("--cycles", min=1, help="Stop after this many cycles.")
    ] = None,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Stop once every job has ended.")
    ] = False,
) -> None:
    """Run the scheduler loop in the foreground (Ctrl-C stops it: running jobs checkpoint and
    resume on the next start)."""
    with contextlib.ExitStack() as stack:
        try:
            path = find_config(config)
            svc = _service(path)
            stack.enter_context(svc.hardened(path))
            sched = svc.scheduler()
        except BudgeteerError as exc:
            fail(exc)
            return
        _run_loop(svc, sched, cycles, until_idle)


def _run_loop(svc: Service, sched: Scheduler, cycles: int | None, until_idle: bool) -> None:
    console = Console(stderr=True)

    def show(report: CycleReport, seconds: float) -> None:
        for job_id in report.adopted:
            console.print(f"re-attached {job_id}")
        for job_id in report.launched:
            console.print(f"launched {job_id}")
        for job_id, state in report.finished:
            console.print(f"attempt of {job_id} ended: {state.value}")
        for job_id in report.quarantined:
            console.print(f"[yellow]quarantined {job_id}: its planning raised (see status)[/]")
        for job_id, error in report.errors:
            console.print(f"[yellow]backend error for {job_id}:[/] {error}")

    driver = Driver(
        sched,
        svc.store.leader_lock(),
        svc.config.interval_seconds,
        min_gap_seconds=0.0,
        on_report=show,
        say=console.print,
    )
    driver.run(cycles, until_idle=until_idle)


@app.command("status")
def status(
    job: Annotated[
        str | None, typer.Argument(help="A job id: its events. Without: every job.")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Jobs with their state, attempts and cost; or one job's events."""
    try:
        svc = _service(config)
        console = Console()
        if job is not None:
            table = Table(title=f"{job}: {svc.store.job(job).state.value}")
            for col in ("seq", "at", "from", "to", "cause"):
                table.add_column(col)
            for e in svc.store.events(job):
                table.add_row(
                    str(e.seq),
                    when(e.at),
                    e.from_state.value if e.from_state else "",
                    e.to_state.value,
                    e.cause,
                )
            console.print(table)
            return
        table = Table(title="jobs")
        for col in ("job", "team", "tier", "state", "attempts", "cost $"):
            table.add_column(col)
        for j in svc.store.jobs():
            cost = sum((e.amount_usd for e in svc.store.ledger(j.id)), Decimal(0))
            table.add_row(
                j.id,
                j.team,
                j.tier.name,
                j.state.value,
                str(len(svc.store.attempts(j.id))),
                usd(cost),
            )
        console.print(table)
    except BudgeteerError as exc:
        fail(exc)


@app.command("cancel")
def cancel(job: str, config: ConfigOption = None) -> None:
    """Cancel a job (a running one is stopped by the next scheduler cycle)."""
    try:
        svc = _service(config)
        before = svc.store.job(job).state
        state = svc.store.request_cancel(job, at=svc.clock.now())
    except BudgeteerError as exc:
        fail(exc)
        return
    if before.is_terminal:
        typer.echo(f"{job}: already {before.value}; nothing to cancel", err=True)
        raise typer.Exit(code=1)
    if state.is_active:
        typer.echo(f"{job}: {state.value}; cancel requested (the next cycle stops it)")
    else:
        typer.echo(f"{job}: cancelled (it had not started)")


@app.command("ledger")
def ledger(
    job: Annotated[str | None, typer.Option("--job", help="Only this job's spend.")] = None,
    detail: Annotated[
        bool,
        typer.Option(
            "--detail",
            help="One row per stretch at one price, with its source and exact amount.",
        ),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Spend per attempt (job, its attempt number, where, how long, amount) and the total;
    ``--detail`` shows every billed stretch with its price and source."""
    try:
        svc = _service(config)
        if job is not None:
            svc.store.job(job)  # an unknown id is an error here as everywhere
        entries = svc.store.ledger(job)
        attempts = {a.id: a for a in svc.store.attempts(job)}
    except BudgeteerError as exc:
        fail(exc)
        return
    table = Table(title="ledger (detail)" if detail else "ledger")
    if detail:
        for col in ("job", "attempt", "start", "end", "$/h", "source", "amount $"):
            table.add_column(col, justify="right" if col in {"$/h", "amount $"} else "left")
        for e in entries:
            table.add_row(
                e.job_id,
                str(attempts[e.attempt_id].number),
                e.start.isoformat(timespec="seconds"),
                e.end.isoformat(timespec="seconds"),
                str(e.usd_per_hour),
                e.price_source,
                f"{e.amount_usd:.6f}",
            )
    else:
        for col in ("job", "attempt", "offering", "instances", "start", "hours", "amount $"):
            table.add_column(col, justify="right" if col in {"hours", "amount $"} else "left")
        billed: dict[int, Decimal] = {}
        for e in entries:
            billed[e.attempt_id] = billed.get(e.attempt_id, Decimal(0)) + e.amount_usd
        for attempt_id, amount in billed.items():
            a = attempts[attempt_id]
            end = a.ended_at or max(e.end for e in entries if e.attempt_id == attempt_id)
            table.add_row(
                a.job_id,
                str(a.number),
                a.offering_id,
                str(a.instances),
                when(a.started_at),
                f"{(end - a.started_at).total_seconds() / 3600:.2f}",
                usd(amount),
            )
    Console().print(table)
    charges = svc.store.pool_charges() if job is None else []
    if charges:  # what pools booted with no job (min, warm windows): their teams'
        pools = Table(title="pool charges (instances booted with no job, paid by the team)")
        for col in ("team", "offering", "instances", "start", "hours", "$/h", "source", "amount $"):
            pools.add_column(col, justify="right" if col in {"hours", "amount $"} else "left")
        for c in charges:
            pools.add_row(
                c.team,
                c.offering_id,
                str(c.instances),
                when(c.start),
                f"{(c.end - c.start).total_seconds() / 3600:.2f}",
                str(c.usd_per_hour),
                c.price_source,
                f"{c.amount_usd:.6f}" if detail else usd(c.amount_usd),
            )
        Console().print(pools)
    charged = sum((c.amount_usd for c in charges), Decimal(0))
    total = sum((e.amount_usd for e in entries), Decimal(0)) + charged
    typer.echo(f"total: {total} USD" if detail else f"total: {usd(total)} USD")
    idle = sum((e.amount_usd for e in entries if is_idle(e)), Decimal(0)) + charged
    if idle:
        typer.echo(f"of which idle (pooled instances with no job on them): {usd(idle)} USD")
    jobs = {j.id: j for j in svc.store.jobs()}
    spent = spend_by_job((e.job_id, e.amount_usd) for e in svc.store.ledger())
    wasted = {j for ids in wasted_jobs(jobs).values() for j in ids}
    if job is not None:
        wasted &= {job}
    lost = sum((spent.get(j, Decimal(0)) for j in wasted), Decimal(0))
    if lost:
        runs = ", ".join(sorted(wasted))
        typer.echo(f"waste (runs a validation gate stopped: {runs}): {usd(lost)} USD")


@app.command("serve")
def serve_command(
    config: ConfigOption = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Default: the config's api.host.")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535)] = None,
    scheduler: Annotated[
        bool,
        typer.Option(
            "--scheduler/--no-scheduler",
            help="Run the scheduler loop here (--no-scheduler: an API-only replica).",
        ),
    ] = True,
    workers: Annotated[
        int, typer.Option("--workers", min=1, max=64, help="API processes (one leads).")
    ] = 1,
    tls_cert: Annotated[
        Path | None,
        typer.Option("--tls-cert", help="PEM certificate chain: serve HTTPS (with --tls-key)."),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")
    ] = None,
) -> None:
    """Serve the REST API, the dashboard and metrics, and run the scheduler (until SIGTERM)."""
    from budgeteer.service.server import serve  # noqa: PLC0415 - keeps the other commands light

    with contextlib.ExitStack() as stack:
        try:
            cfg, root = load_config(config)
            update: dict[str, object] = {
                "host": host or cfg.api.host,
                "port": cfg.api.port if port is None else port,
            }
            if tls_cert is not None or tls_key is not None:  # paths from here, not the config's
                update |= {
                    "tls_cert": tls_cert and tls_cert.resolve(),
                    "tls_key": tls_key and tls_key.resolve(),
                }
            try:
                api = ApiConfig.model_validate({**cfg.api.model_dump(), **update})
            except ValidationError as exc:
                raise spec_errors(exc, "serve options") from None
            svc = build(cfg.model_copy(update={"api": api}), root)
            stack.enter_context(svc.hardened(config))
        except BudgeteerError as exc:
            fail(exc)
            return
        serve(svc, api.host, api.port, scheduler=scheduler, workers=workers, config_path=config)


token_app = typer.Typer(
    help="Team API tokens (on the store named in the config).", no_args_is_help=True
)
app.add_typer(token_app, name="token")


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", help="Who uses it (e.g. 'growth airflow').")],
    team: Annotated[list[str], typer.Option("--team", help="A team it may act for (repeat).")],
    config: ConfigOption = None,
) -> None:
    """Create a team token and print its secret (shown only this once; stored as a hash)."""
    from budgeteer.api.admin import TokenRequest, make_token  # noqa: PLC0415

    try:
        request = TokenRequest.model_validate({"name": name, "teams": team})
    except ValidationError as exc:
        fail(spec_errors(exc))
        return
    try:
        svc = _service(config)
        token, secret = make_token(svc.store, request, SystemClock().now())  # wall clock: a record
    except BudgeteerError as exc:
        fail(exc)
        return
    typer.echo(f"{token.id} ({', '.join(token.teams)}): {secret}")


@token_app.command("list")
def token_list(config: ConfigOption = None) -> None:
    """Every token (never the secrets)."""
    try:
        svc = _service(config)
    except BudgeteerError as exc:
        fail(exc)
        return
    table = Table(title="tokens")
    for col in ("id", "name", "teams", "created", "revoked"):
        table.add_column(col)
    for t in svc.store.tokens():
        table.add_row(
            t.id,
            t.name,
            ", ".join(t.teams),
            t.created_at.isoformat(timespec="seconds"),
            t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else "",
        )
    Console().print(table)


@token_app.command("revoke")
def token_revoke(token_id: str, config: ConfigOption = None) -> None:
    """Revoke a token (at once on this store; a running service's cache forgets it within 2 s)."""
    try:
        svc = _service(config)
        token = svc.store.revoke_token(token_id, at=SystemClock().now())
    except BudgeteerError as exc:
        fail(exc)
        return
    typer.echo(f"{token.id}: revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S}")
