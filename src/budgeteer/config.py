"""The service configuration file (YAML or TOML), validated with every problem named by its field.

Defaults work with no file at all: SQLite next to the config (or in the working folder), the
sandbox backend on a seeded simulated spot market, the bundled catalog, no budgets, the API on
127.0.0.1:8080.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from budgeteer.catalog.onprem import OnPremSpec
from budgeteer.errors import SpecError, SpecErrors
from budgeteer.spec.errors import spec_errors
from budgeteer.spec.files import read_document
from budgeteer.spec.paths import FilePath
from budgeteer.spec.pool import PoolSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TraceMarketConfig(_Strict):
    """Replay a real availability trace (and optionally a price series) for spot offerings."""

    trace: FilePath
    prices: FilePath | None = None
    price_key: str | None = None


class RateMarketConfig(_Strict):
    """Draw spot up/down periods from each offering's interruption rate, seeded."""

    seed: Annotated[int, Field(ge=0)] = 0
    mean_outage_hours: Annotated[float, Field(gt=0)] = 0.5


class SandboxConfig(_Strict):
    """The embedded backend: local processes on a simulated market."""

    kind: Literal["sandbox"] = "sandbox"
    workdir: FilePath = Path(".budgeteer")
    grace_seconds: Annotated[float, Field(ge=0)] = 30.0
    time_scale: Annotated[float, Field(gt=0, le=1_000_000)] = 1.0
    market: TraceMarketConfig | RateMarketConfig = Field(default_factory=RateMarketConfig)
    #: the unprivileged user (name or uid) jobs run as when the service runs as root (default
    #: ``nobody``); never root. An ordinary service runs jobs as itself
    run_as: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    #: names of the service's environment variables a job also sees (beyond PATH, locale,
    #: TZ, PYTHONPATH, VIRTUAL_ENV, CUDA_VISIBLE_DEVICES); the rest — tokens, database URLs —
    #: stay with the service
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, max_length=256
    )


class SlurmPlacementConfig(_Strict):
    """Where one offering runs on the Slurm cluster."""

    partition: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]
    constraint: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    gres: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class SlurmConfig(_Strict):
    """An existing Slurm cluster (``budgeteer.backends.slurm``): each attempt an sbatch job.
    ``placements`` maps the catalog offerings the cluster provides to partitions; the planner
    considers only those. ``slurm_conf`` names the cluster's slurm.conf (default: the machine's
    Slurm configuration, or ``SLURM_CONF``). Times are real: there is no time scale."""

    kind: Literal["slurm"]
    workdir: FilePath = Path(".budgeteer")
    grace_seconds: Annotated[float, Field(ge=0)] = 30.0
    slurm_conf: FilePath | None = None
    #: the user jobs run as (``sbatch --uid``) when the service runs as root (default:
    #: nobody; never root); a service that is not root submits as itself
    run_as: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    placements: Annotated[dict[str, SlurmPlacementConfig], Field(min_length=1, max_length=4096)]
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, max_length=256
    )


class RayConfig(_Strict):
    """An existing Ray cluster (``budgeteer.backends.ray``, the ``ray`` extra): each attempt a
    Ray job. ``address`` is the cluster's dashboard (Jobs API) URL; ``placements`` maps the
    catalog offerings the cluster provides to the custom resource their nodes carry (the
    planner considers only those)."""

    kind: Literal["ray"]
    address: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=512)]
    #: the cluster's GCS (``host:port``, printed by ``ray start --head``): capacity from its
    #: nodes and the drain notice; without it Ray queues what does not fit and only a node's
    #: death is seen
    gcs_address: Annotated[str, Field(pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")] | None = None
    #: the interpreter, on the cluster's nodes, that runs the gang of multi-node attempts
    #: (``budgeteer.backends.ray_gang``; budgeteer must be installed there); default: the
    #: service's own (a local cluster)
    python: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    #: seconds a rank of a gang has between the notice and SIGKILL
    grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    workdir: FilePath = Path(".budgeteer")
    placements: Annotated[
        dict[str, Annotated[str, Field(min_length=1, max_length=256)]],
        Field(min_length=1, max_length=4096),
    ]
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, max_length=256
    )


_AWS_ID = r"^[A-Za-z0-9._:/+=@-]+$"


class Ec2Config(_Strict):
    """The team's AWS account (``budgeteer.backends.ec2``, the ``aws`` extra): each attempt an
    EC2 ``RunInstances``. The planner considers the catalog's AWS offerings in ``region`` that
    have an AMI (``images``: accelerator → AMI id, ``"*"`` for the rest) and, when zonal, a
    subnet for their zone (``subnets``: zone or AZ id → subnet id, ``"*"`` for regional
    offerings). Checkpoints, exits and stops live under ``s3://bucket/prefix/``. Credentials are
    boto3's own (instance profile, environment, ``~/.aws``); see docs/backends/ec2.md for the
    IAM policy."""

    kind: Literal["ec2"]
    workdir: FilePath = Path(".budgeteer")
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")]
    bucket: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")]
    prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9._/-]{1,200}$")] = "budgeteer"
    images: Annotated[
        dict[str, Annotated[str, Field(pattern=r"^ami-[0-9a-f]{8,17}$")]],
        Field(min_length=1, max_length=256),
    ]
    subnets: dict[str, Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]] = Field(
        default_factory=dict, max_length=256
    )
    security_groups: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, max_length=16
    )
    #: an instance profile's name or ARN (the role the agent uses for S3)
    instance_profile: Annotated[str, Field(pattern=_AWS_ID, max_length=512)] | None = None
    key_name: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    #: the SQS queue an EventBridge rule sends "EC2 Spot Instance Interruption Warning" to
    interruption_queue_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None
    #: the interpreter on the AMI that has budgeteer (the agent)
    python: Annotated[str, Field(min_length=1, max_length=1024)] = "python3"
    instance_workdir: Annotated[str, Field(pattern=r"^/[^\s]*$", max_length=1024)] = (
        "/var/lib/budgeteer"
    )
    #: seconds between the notice and SIGKILL (AWS gives two minutes before it takes a spot
    #: instance: keep it under 120)
    grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 110.0
    poll_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0
    sync_seconds: Annotated[float, Field(gt=0, le=86400)] = 60.0
    #: the agent powers its instance off when the job ends (billing stops even if the service
    #: is down); the backend also terminates it
    shutdown: bool = True
    #: ``MaxPrice`` of spot requests as a share of the on-demand price (default: AWS's cap,
    #: the on-demand price)
    spot_max_price_fraction: Annotated[float, Field(gt=0, le=10)] | None = None
    #: most instances at once per offering (the account's quotas, or a team's cap)
    limits: dict[str, Annotated[int, Field(ge=0, le=100_000)]] = Field(
        default_factory=dict, max_length=4096
    )
    #: another EC2/S3/SQS endpoint (a VPC endpoint; moto in tests)
    endpoint_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None


_DNS = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_LABEL_KEY = r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
_LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"


class KubernetesPlacementConfig(_Strict):
    """What one offering's node pool needs beyond its instance type and market: node labels
    and tolerations."""

    node_selector: dict[
        Annotated[str, Field(pattern=_LABEL_KEY)], Annotated[str, Field(pattern=_LABEL_VALUE)]
    ] = Field(default_factory=dict, max_length=32)
    tolerations: list[
        dict[Literal["key", "operator", "value", "effect"], Annotated[str, Field(max_length=253)]]
    ] = Field(default_factory=list, max_length=32)


class KubernetesConfig(_Strict):
    """A Kubernetes cluster (``budgeteer.backends.kubernetes``, the ``kubernetes`` extra): each
    attempt a ``batch/v1`` Job. ``placements`` maps the catalog offerings the cluster's node
    pools provide (the planner considers only those) to extra node selectors and tolerations;
    the instance type and the market's label (by ``platform``) are added by themselves.
    Without ``kubeconfig`` the service uses its pod's service account (in-cluster)."""

    kind: Literal["kubernetes"]
    workdir: FilePath = Path(".budgeteer")
    namespace: Annotated[str, Field(pattern=_DNS)] = "default"
    kubeconfig: FilePath | None = None
    context: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    #: how nodes carry their market: karpenter, eks (managed node groups), gke, aks
    platform: Literal["karpenter", "eks", "gke", "aks"] = "karpenter"
    #: accelerator → container image (the job's framework and budgeteer's SDK); "*": the rest
    images: Annotated[
        dict[str, Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\s]+$")]],
        Field(min_length=1, max_length=256),
    ]
    placements: Annotated[
        dict[str, KubernetesPlacementConfig], Field(min_length=1, max_length=4096)
    ]
    gpu_resource: Annotated[str, Field(pattern=_LABEL_KEY)] = "nvidia.com/gpu"
    #: a Kueue LocalQueue: the Job is created suspended with its label, Kueue admits it
    queue_name: Annotated[str, Field(pattern=_DNS)] | None = None
    #: a PersistentVolumeClaim for checkpoints (a subfolder per job), ReadWriteMany
    checkpoint_claim: Annotated[str, Field(pattern=_DNS)] | None = None
    service_account: Annotated[str, Field(pattern=_DNS)] | None = None
    grace_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    #: a pod that finds no node this long means no capacity (the attempt ends, the offering
    #: rests as long)
    unschedulable_seconds: Annotated[float, Field(gt=0, le=86400)] = 600.0
    pass_env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list, max_length=256
    )


class ApiConfig(_Strict):
    """``budgeteer serve``: where the API listens and who may use it.

    The admin token comes from ``BUDGETEER_ADMIN_TOKEN`` when set, else ``admin_token``; with
    neither, ``serve`` makes one up and prints it once. ``public_url`` is what jobs are told to
    report progress to (default: ``http://HOST:PORT``). The secret key signs job tokens (default:
    a random key kept in the work folder)."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    admin_token: Annotated[str, Field(min_length=16)] | None = None
    public_url: str | None = None
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    log_json: bool = False
    webhook_allow_private: bool = False
    #: commands the API may run: each an argument-list prefix, matched exactly
    #: (``[/opt/venv/bin/python, -m, mypkg.train]``). A submitted command outside them is
    #: refused (403, ``command``)
    allowed_commands: list[Annotated[list[str], Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=256
    )
    #: run any command a team token submits, as the service's user (``serve`` warns at start)
    run_any_command: bool = False
    #: ``/metrics`` answers without a token (every team's spend and limits): only for a scrape
    #: inside a private network; ``serve`` warns at start
    metrics_public: bool = False
    #: a token for Prometheus alone (``BUDGETEER_METRICS_TOKEN`` overrides); the admin token
    #: works too
    metrics_token: Annotated[str, Field(min_length=16)] | None = None
    #: serve HTTPS with this certificate chain and private key (PEM files; both or neither).
    #: Without them, binding beyond loopback is warned about at start
    tls_cert: FilePath | None = None
    tls_key: FilePath | None = None

    @model_validator(mode="after")
    def _tls_pair(self) -> ApiConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            missing = "tls_key" if self.tls_key is None else "tls_cert"
            raise ValueError(f"{missing} is needed too: TLS takes a certificate and its key")
        return self


#: The backends' kinds.
BACKEND_KINDS = ("sandbox", "slurm", "ray", "ec2", "kubernetes")

#: One of the backends, by ``kind``.
BackendConfig = Annotated[
    SandboxConfig | SlurmConfig | RayConfig | Ec2Config | KubernetesConfig,
    Field(discriminator="kind"),
]


class LivePricesConfig(_Strict):
    """Live prices (``budgeteer.catalog.live``): the service fetches its offerings' prices from
    the clouds' APIs every ``refresh_seconds`` and keeps them in the store; engines' backends
    plan and bill with them. A price older than ``max_age_seconds`` is still used (the last
    known) but marked stale, warned about, and shown so under ``/v1/offerings``."""

    providers: Annotated[list[Literal["aws", "azure", "gcp"]], Field(min_length=1, max_length=3)]
    #: default: every region of the offerings the backend serves
    regions: list[Annotated[str, Field(pattern=r"^[a-z0-9-]{2,64}$")]] | None = None
    refresh_seconds: Annotated[float, Field(ge=60, le=7 * 86400)] = 3600.0
    max_age_seconds: Annotated[float, Field(gt=0, le=30 * 86400)] = 6 * 3600.0
    azure_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] = (
        "https://prices.azure.com/api/retail/prices"
    )
    gcp_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] = (
        "https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus"
    )
    gcp_api_key_env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "GCP_API_KEY"
    aws_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s]+$")] | None = None


class MarketSeedConfig(_Strict):
    """A spot offering's market as recorded before the service saw it: an availability trace
    (``budgeteer.traces``; a tick counts as up when it has one instance or more). The spot
    decider leans on its prior until it has seen weeks of a market; a seed gives it those weeks
    on its first day."""

    offering: Annotated[str, Field(min_length=1, max_length=300)]
    trace: FilePath


#: The database drivers the store is tested on (``sqlite:///state.db``,
#: ``postgresql+psycopg://user@host/db``).
STORE_DRIVERS = ("sqlite", "sqlite+pysqlite", "postgresql+psycopg")


def _store_url(url: str) -> str:
    try:
        driver = make_url(url).drivername
    except ArgumentError:
        raise ValueError(
            "not a database URL (sqlite:///state.db, postgresql+psycopg://user@host/db)"
        ) from None
    if driver not in STORE_DRIVERS:
        raise ValueError(f"driver {driver!r} is not one of {', '.join(STORE_DRIVERS)}")
    return url


class ServiceConfig(_Strict):
    """``budgeteer serve`` / ``run`` / ``submit`` / ``status`` configuration."""

    store: Annotated[str, AfterValidator(_store_url)] = "sqlite:///budgeteer.db"
    catalog: FilePath | None = None
    budgets: FilePath | None = None
    backend: BackendConfig = Field(default_factory=SandboxConfig)
    interval_seconds: Annotated[float, Field(gt=0, le=3600)] = 5.0
    api: ApiConfig = Field(default_factory=ApiConfig)
    #: live prices from the clouds (engines' backends; the sandbox keeps its market's)
    prices: LivePricesConfig | None = None
    #: on-prem GPU pools lent to retraining outside their closed hours (amortised price, a
    #: calendar): offerings beside the catalog's (``budgeteer.catalog.onprem``)
    onprem: list[OnPremSpec] = Field(default_factory=list, max_length=64)
    #: the trigger policy ``POST /v1/signals`` applies (``budgeteer.triggers.policy``)
    triggers: FilePath | None = None
    #: offerings whose instances stay warm between jobs, and short jobs batched on them
    #: (``budgeteer.spec.pool``); the sandbox and EC2 backends keep them, Kubernetes reads its
    #: node pools' idle nodes
    pools: list[PoolSpec] = Field(default_factory=list, max_length=256)
    #: recorded market histories for spot offerings the store has none of yet
    #: (``Service.seed_markets``)
    market_seeds: list[MarketSeedConfig] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _one_seed_per_offering(self) -> ServiceConfig:
        first: dict[str, int] = {}
        for i, seed in enumerate(self.market_seeds):
            if seed.offering in first:
                raise ValueError(
                    f"market_seeds[{i}].offering: {seed.offering!r} is seeded already "
                    f"(market_seeds[{first[seed.offering]}])"
                )
            first[seed.offering] = i
        return self

    @model_validator(mode="after")
    def _pools_fit_the_backend(self) -> ServiceConfig:
        # the sandbox and EC2 keep instances themselves; on a cluster, its nodes are the warm
        # instances and the cluster keeps and removes them (it boots nothing for budgeteer's
        # floors either): only max and batch_wait apply
        where = {
            "kubernetes": "the node pool's minimum and the autoscaler's scale-down delay (e.g. "
            "Karpenter's consolidateAfter)",
            "ray": "the node type's min_workers and the autoscaler's idle_timeout_minutes",
            "slurm": "the partition's nodes (and its power saving's SuspendTime)",
        }.get(self.backend.kind)
        for i, pool in enumerate(self.pools if where else ()):
            set_here = {
                "min": bool(pool.min),
                "warm": bool(pool.warm),
                "teams": bool(pool.teams),
                "idle_timeout": pool.idle_timeout is not None,
            }
            field = next((f for f, given in set_here.items() if given), None)
            if field is not None:
                raise ValueError(
                    f"pools[{i}].{field}: on {self.backend.kind} the cluster keeps and removes "
                    f"its nodes; set {where} there — budgeteer takes max and batch_wait"
                )
        return self


def load_config(path: Path | None) -> tuple[ServiceConfig, Path]:
    """The configuration and the folder relative paths are resolved against: the file's, or
    the working folder for no file and for one that is not a regular file (``/dev/null``, a
    pipe such as ``--config <(envsubst < cfg.yaml)``, whose folder is no place for a store)."""
    if path is None:
        return ServiceConfig(), Path.cwd()
    root = path.parent if path.is_file() else Path.cwd()
    doc = read_document(path) or {}
    if not isinstance(doc, dict):
        raise SpecError("(root)", "expected a mapping", str(path))
    if "backend" in doc and isinstance(doc["backend"], dict):
        kind = doc["backend"].setdefault("kind", "sandbox")
        if kind not in BACKEND_KINDS:
            raise SpecError(
                "backend.kind",
                f"unknown backend {kind!r}; available: {', '.join(BACKEND_KINDS)}",
                str(path),
            )
    try:
        return ServiceConfig.model_validate(doc), root
    except ValidationError as exc:
        raise _without_backend_tag(spec_errors(exc, str(path))) from None


def _without_backend_tag(errors: SpecErrors) -> SpecErrors:
    """Pydantic names a field of a discriminated union with its tag (``backend.sandbox.
    time_scale``); the file says ``backend.time_scale``."""
    out = []
    for e in errors.errors:
        field = e.field
        for kind in BACKEND_KINDS:
            if field == f"backend.{kind}" or field.startswith(f"backend.{kind}."):
                field = "backend" + field.removeprefix(f"backend.{kind}")
        out.append(SpecError(field, e.problem, e.source))
    return SpecErrors(out)
