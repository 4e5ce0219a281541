"""The composition root: build the store, clock, market, backend and scheduler from a config."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from budgeteer.backends import RateMarket, SandboxBackend, SandboxMarket
from budgeteer.backends.base import ComputeBackend
from budgeteer.backends.ec2 import Ec2Backend, Ec2Settings
from budgeteer.backends.jobuser import JobUser, resolve_job_user
from budgeteer.backends.k8s_manifest import K8sPlacement, K8sSettings
from budgeteer.backends.kubernetes import KubernetesBackend, api_client_factory
from budgeteer.backends.market import CatalogPrices, ZonedMarket, replay_market
from budgeteer.backends.ray import RayBackend
from budgeteer.backends.slurm import SlurmBackend, SlurmPlacement
from budgeteer.catalog import Catalog, load_catalog
from budgeteer.catalog.live import FeedSettings, PriceRefresher, StorePrices, fetch_quotes
from budgeteer.catalog.onprem import pool_calendar, pool_id, pool_offering
from budgeteer.catalog.quotes import Quote
from budgeteer.clock import SystemClock
from budgeteer.config import (
    Ec2Config,
    KubernetesConfig,
    RateMarketConfig,
    RayConfig,
    SandboxConfig,
    ServiceConfig,
    SlurmConfig,
)
from budgeteer.core.spot.estimate import MarketHistory
from budgeteer.domain.budget import Budget
from budgeteer.domain.offering import Market, Offering
from budgeteer.errors import SpecError
from budgeteer.scheduler import Scheduler
from budgeteer.service.hardening import protected
from budgeteer.spec import load_budgets_file
from budgeteer.spec.budget import BudgetSpec
from budgeteer.spec.files import read_document
from budgeteer.spec.pool import pool_settings
from budgeteer.store import SqlStore
from budgeteer.traces import TraceError, load_price_series, load_trace
from budgeteer.triggers.policy import TriggerPolicy, load_policy


@dataclass
class Service:
    """Everything a command needs, wired once."""

    config: ServiceConfig
    store: SqlStore
    catalog: Catalog
    clock: SystemClock
    budgets: tuple[Budget, ...]
    root: Path
    _store_prices: StorePrices | None = None

    def workdir(self) -> Path:
        """The backend's work folder (checkpoints, logs, the clock anchor, the secret key)."""
        return self.path(self.config.backend.workdir)

    def hardened(self, config_path: Path | None) -> AbstractContextManager[None]:
        """The block in which the service runs jobs: its files private, jobs' folders
        reachable (see :mod:`budgeteer.service.hardening`)."""
        return protected(self.config, config_path, self.workdir(), self.store.url, self.job_user())

    def job_user(self) -> JobUser | None:
        """The user jobs run as (``None``: this service's own, which is then not root)."""
        backend = self.config.backend
        if isinstance(backend, RayConfig | Ec2Config | KubernetesConfig):
            return None  # jobs run as the user the nodes (the AMI's agent) run as
        return resolve_job_user(backend.run_as)

    def seed_budgets(self) -> int:
        """Put the config's budgets file into the store where their ids are not there yet (the
        store's copy is the one the API shows and changes). Returns how many were added."""
        if self.config.budgets is None:
            return 0
        path = self.path(self.config.budgets)
        doc = read_document(path) or {}
        known = {s.get("id") for s in self.store.budget_specs()}
        added = 0
        for i, item in enumerate(doc.get("budgets", []) if isinstance(doc, dict) else []):
            spec = BudgetSpec.parse(item, str(path), f"budgets[{i}]").model_dump(mode="json")
            if spec["id"] not in known:
                self.store.put_budget(spec, create=True)
                added += 1
        return added

    def seed_markets(self, offerings: Sequence[Offering]) -> int:
        """Put the config's recorded market histories (``market_seeds``) into the store for the
        spot offerings that have none yet — what the service has seen itself is never replaced,
        and a seed's trace is read only while its offering has no history (once, then). Every
        seed is checked before any is written: a bad one raises :class:`SpecError` naming its
        field, and nothing is kept. Returns how many were added."""
        if not self.config.market_seeds:
            return 0
        by_id = {o.id: o for o in offerings}
        seen = {h.offering_id for h in self.store.markets()}
        histories = []
        for i, seed in enumerate(self.config.market_seeds):
            offering = by_id.get(seed.offering)
            if offering is None:
                raise SpecError(
                    f"market_seeds[{i}].offering",
                    f"no offering {seed.offering!r} in this service's catalog (on an engine: "
                    "among its placements)",
                )
            if offering.market is not Market.SPOT:
                raise SpecError(
                    f"market_seeds[{i}].offering",
                    f"{seed.offering!r} is a {offering.market.value} offering; only spot "
                    "offerings have a market to seed",
                )
            if seed.offering in seen:
                continue
            path = self.path(seed.trace)
            try:
                trace = load_trace(path)
            except TraceError as exc:
                raise SpecError(
                    f"market_seeds[{i}].trace", f"{exc.field}: {exc.problem}", str(path)
                ) from None
            available = np.array(trace.available) >= 1
            histories.append(MarketHistory.recorded(seed.offering, available, trace.gap_hours))
        for history in histories:
            self.store.put_market(history)
        return len(histories)

    def scheduler(
        self,
        job_env: Callable[[str], Mapping[str, str]] | None = None,
        *,
        fixed_budgets: bool = True,
    ) -> Scheduler:
        """A scheduler over the configured backend; with ``fixed_budgets`` False it reads
        budgets only from the store (where ``seed_budgets`` put the file's). On an engine the
        planner sees only the offerings the engine provides (its placements)."""
        backend_cfg = self.config.backend
        workdir = self.workdir()
        catalog = self.catalog
        backend: ComputeBackend
        if isinstance(backend_cfg, SlurmConfig):
            backend, catalog = self._slurm(backend_cfg, workdir)
        elif isinstance(backend_cfg, RayConfig):
            placed = self._placed(backend_cfg.placements)
            ray = RayBackend(
                self.clock,
                backend_cfg.address,
                backend_cfg.placements,
                pass_env=tuple(backend_cfg.pass_env),
                gcs_address=backend_cfg.gcs_address,
                python=backend_cfg.python or sys.executable,
                # one cluster may serve several budgeteer deployments (or a store made anew):
                # their attempts' submission ids must not meet
                namespace=self.namespace(),
                grace_seconds=backend_cfg.grace_seconds,
                pools=pool_settings(self.config.pools, placed.offerings),
            )
            backend, catalog = ray, placed
        elif isinstance(backend_cfg, Ec2Config):
            backend, catalog = self._ec2(backend_cfg)
        elif isinstance(backend_cfg, KubernetesConfig):
            backend, catalog = self.kubernetes(backend_cfg)
        else:
            backend = SandboxBackend(
                self.clock,
                self._market(),
                workdir,
                grace_seconds=backend_cfg.grace_seconds,
                run_as=self.job_user(),
                pass_env=tuple(backend_cfg.pass_env),
                pools=pool_settings(self.config.pools, catalog.offerings),
                offerings=catalog.offerings,
            )
        if isinstance(backend, CatalogPrices) and self.config.prices is not None:
            backend.live_prices = self.store_prices()
        self.seed_markets(catalog.offerings)  # before the scheduler's market book reads them
        return Scheduler(
            self.store,
            backend,
            catalog,
            self.clock,
            workdir / "checkpoints",
            budgets=self.budgets if fixed_budgets else (),
            job_env=job_env,
        )

    def _placed(self, placements: Mapping[str, object]) -> Catalog:
        """The catalog reduced to the offerings an engine provides (each must exist)."""
        known = {o.id for o in self.catalog.offerings}
        unknown = sorted(set(placements) - known)
        if unknown:
            raise SpecError(
                f"backend.placements.{unknown[0]}",
                f"no such offering in the catalog ({self.catalog.source})",
            )
        offerings = tuple(o for o in self.catalog.offerings if o.id in placements)
        return dataclasses.replace(self.catalog, offerings=offerings)

    def _slurm(self, cfg: SlurmConfig, workdir: Path) -> tuple[SlurmBackend, Catalog]:
        catalog = self._placed(cfg.placements)
        environ = dict(os.environ)
        if cfg.slurm_conf is not None:
            environ["SLURM_CONF"] = str(self.path(cfg.slurm_conf))
        placements = {
            offering: SlurmPlacement(p.partition, p.constraint, p.gres)
            for offering, p in cfg.placements.items()
        }
        backend = SlurmBackend(
            self.clock,
            workdir,
            placements,
            grace_seconds=cfg.grace_seconds,
            pass_env=tuple(cfg.pass_env),
            environ=environ,
            run_as=self.job_user(),
            pools=pool_settings(self.config.pools, catalog.offerings),
        )
        return backend, catalog

    def _ec2(self, cfg: Ec2Config) -> tuple[Ec2Backend, Catalog]:
        """The EC2 backend and the catalog's offerings it can launch (each limit on one)."""
        settings = Ec2Settings(
            region=cfg.region,
            bucket=cfg.bucket,
            images=dict(cfg.images),
            prefix=cfg.prefix,
            subnets=dict(cfg.subnets),
            security_groups=tuple(cfg.security_groups),
            instance_profile=cfg.instance_profile,
            key_name=cfg.key_name,
            interruption_queue_url=cfg.interruption_queue_url,
            python=cfg.python,
            instance_workdir=cfg.instance_workdir,
            grace_seconds=cfg.grace_seconds,
            poll_seconds=cfg.poll_seconds,
            sync_seconds=cfg.sync_seconds,
            shutdown=cfg.shutdown,
            spot_max_price_fraction=cfg.spot_max_price_fraction,
            limits=dict(cfg.limits),
            endpoint_url=cfg.endpoint_url,
        )
        known = {o.id for o in self.catalog.offerings}
        unknown = sorted(set(cfg.limits) - known)
        if unknown:
            raise SpecError(
                f"backend.limits.{unknown[0]}",
                f"no such offering in the catalog ({self.catalog.source})",
            )
        offerings = tuple(o for o in self.catalog.offerings if settings.serves(o))
        if not offerings:
            raise SpecError(
                "backend.images",
                f"no AWS offering of the catalog in {cfg.region} can launch: each needs an "
                "image for its accelerator (or '*') and, when zonal, a subnet for its zone",
            )
        backend = Ec2Backend(
            self.clock,
            settings,
            {o.id: o for o in offerings},
            # one account may serve several budgeteer deployments: their tags must not meet
            namespace=self.namespace(),
            pools=pool_settings(self.config.pools, offerings),
        )
        return backend, dataclasses.replace(self.catalog, offerings=offerings)

    def kubernetes(self, cfg: KubernetesConfig) -> tuple[KubernetesBackend, Catalog]:
        """The Kubernetes backend and the catalog's offerings its node pools provide."""
        catalog = self._placed(cfg.placements)
        settings = K8sSettings(
            namespace=cfg.namespace,
            images=dict(cfg.images),
            platform=cfg.platform,
            placements={
                offering: K8sPlacement(
                    dict(p.node_selector),
                    tuple({str(k): v for k, v in t.items()} for t in p.tolerations),
                )
                for offering, p in cfg.placements.items()
            },
            gpu_resource=cfg.gpu_resource,
            queue_name=cfg.queue_name,
            checkpoint_claim=cfg.checkpoint_claim,
            service_account=cfg.service_account,
            grace_seconds=cfg.grace_seconds,
            unschedulable_seconds=cfg.unschedulable_seconds,
        )
        missing = sorted({o.accelerator for o in catalog.offerings if settings.image(o) is None})
        if missing:
            raise SpecError("backend.images", f"no image for {', '.join(missing)} (or '*')")
        kubeconfig = None if cfg.kubeconfig is None else str(self.path(cfg.kubeconfig.expanduser()))
        backend = KubernetesBackend(
            self.clock,
            settings,
            api_client_factory(kubeconfig, cfg.context),
            deployment=self.namespace(),
            pass_env=tuple(cfg.pass_env),
            pools=pool_settings(self.config.pools, catalog.offerings),
            offerings={o.id: o for o in catalog.offerings},
        )
        return backend, catalog

    def store_prices(self) -> StorePrices:
        """The live prices kept in the store (one reader per service)."""
        assert self.config.prices is not None
        if self._store_prices is None:
            max_age = timedelta(seconds=self.config.prices.max_age_seconds)
            self._store_prices = StorePrices(self.store, self.clock, max_age)
        return self._store_prices

    def refresher(self, offerings: Sequence[Offering]) -> PriceRefresher | None:
        """The live price refresher over ``offerings`` (``None`` without a ``prices`` config)."""
        cfg = self.config.prices
        if cfg is None:
            return None
        feeds = FeedSettings(
            cfg.azure_url, cfg.gcp_url, os.environ.get(cfg.gcp_api_key_env), cfg.aws_endpoint
        )
        if "gcp" in cfg.providers and not feeds.gcp_key:
            raise SpecError("prices.gcp_api_key_env", f"{cfg.gcp_api_key_env} is not set")
        providers, regions = tuple(cfg.providers), cfg.regions

        def fetch(now: datetime) -> list[Quote]:
            return fetch_quotes(offerings, providers, regions, feeds, now)[0]

        return PriceRefresher(
            self.store,
            offerings,
            fetch,
            self.clock,
            cfg.refresh_seconds,
            on_refresh=self.store_prices().refreshed,
        )

    def trigger_policy(self) -> tuple[TriggerPolicy, Path] | None:
        """The trigger policy the config names, read and checked (with its folder)."""
        if self.config.triggers is None:
            return None
        path = self.path(self.config.triggers)
        return load_policy(path), path.parent

    def namespace(self) -> str:
        """This deployment's name on shared engines and accounts (a hash of its store)."""
        return hashlib.sha256(self.store.url.encode()).hexdigest()[:8]

    def path(self, p: Path) -> Path:
        """``p`` resolved against the config's folder."""
        return p if p.is_absolute() else self.root / p

    def _market(self) -> SandboxMarket:
        """The sandbox's market: the configured spot market, and each on-prem pool's
        calendar for its offering."""
        spot = self._spot_market()
        if not self.config.onprem:
            return spot
        return ZonedMarket([(pool_id(p), pool_calendar(p)) for p in self.config.onprem], spot)

    def _spot_market(self) -> SandboxMarket:
        market = self.config.backend.market  # type: ignore[union-attr]
        origin = self.clock.now()
        if isinstance(market, RateMarketConfig):
            return RateMarket(origin, market.seed, market.mean_outage_hours)
        trace = load_trace(self.path(market.trace))
        prices = trace.prices
        if market.prices is not None:
            prices = load_price_series(self.path(market.prices), market.price_key)[0]
        return replay_market(
            trace.available, trace.gap_seconds, origin, source=f"trace:{trace.name}", prices=prices
        )


def build(config: ServiceConfig, root: Path) -> Service:
    """Open the store (running migrations), load the catalog and budgets, start the clock."""
    url = config.store
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        url = f"sqlite:///{root / url.removeprefix('sqlite:///')}"
    if url.startswith("sqlite:///"):
        folder = Path(url.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (OSError, ValueError) as exc:  # a file in the way, no permission, a NUL byte
            raise SpecError("store", f"cannot make the folder {folder}: {_why(exc)}") from None
    backend = config.backend
    workdir = backend.workdir if backend.workdir.is_absolute() else root / backend.workdir
    if workdir.exists() and not workdir.is_dir():
        raise SpecError("backend.workdir", f"{workdir} is not a folder")
    catalog = load_catalog(
        None
        if config.catalog is None
        else (config.catalog if config.catalog.is_absolute() else root / config.catalog)
    )
    budgets: tuple[Budget, ...] = ()
    if config.budgets is not None:
        path = config.budgets if config.budgets.is_absolute() else root / config.budgets
        budgets = tuple(load_budgets_file(path)[0])
    if config.onprem:
        pools = tuple(
            pool_offering(catalog.throughput, p, f"onprem[{i}]")
            for i, p in enumerate(config.onprem)
        )
        catalog = dataclasses.replace(catalog, offerings=catalog.offerings + pools)
    return Service(config, SqlStore(url), catalog, _clock(config, workdir), budgets, root)


def _why(exc: Exception) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def _clock(config: ServiceConfig, workdir: Path) -> SystemClock:
    """The service clock; a scaled one keeps its anchor in the work folder (``workdir``,
    resolved) so that every process of this service (and every restart) shares one
    timeline."""
    scale = config.backend.time_scale if isinstance(config.backend, SandboxConfig) else 1.0
    if scale == 1.0:
        return SystemClock()
    workdir.mkdir(parents=True, exist_ok=True)
    anchor_file = workdir / "clock-anchor"
    if not anchor_file.exists():
        tmp = anchor_file.with_name(f".clock-anchor.{os.getpid()}.tmp")
        tmp.write_text(datetime.now(UTC).isoformat())
        os.replace(tmp, anchor_file)
    return SystemClock(scale, datetime.fromisoformat(anchor_file.read_text().strip()))
