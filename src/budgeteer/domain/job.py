"""Jobs as the decision core sees them: the validated spec plus its state in the queue."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from budgeteer.domain.tier import Tier


class JobState(StrEnum):
    """Lifecycle states (the transition table itself lives with the service)."""

    SUBMITTED = "submitted"
    WAITING = "waiting"
    QUEUED = "queued"
    HELD = "held"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    PREEMPTED = "preempted"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEPENDENCY_FAILED = "dependency_failed"
    STOPPED_EARLY = "stopped_early"
    GATE_FAILED = "gate_failed"  # a validation gate ran and did not pass (not a crash)

    @property
    def is_terminal(self) -> bool:
        """True once the job can never run again."""
        return self in _TERMINAL

    @property
    def is_pending(self) -> bool:
        """True while the job waits for the scheduler to admit and place it."""
        return self in _PENDING

    @property
    def is_active(self) -> bool:
        """True while the job holds (or is acquiring) compute."""
        return self in _ACTIVE


_TERMINAL = frozenset(
    {
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.DEPENDENCY_FAILED,
        JobState.STOPPED_EARLY,
        JobState.GATE_FAILED,
    }
)
_PENDING = frozenset({JobState.SUBMITTED, JobState.WAITING, JobState.QUEUED, JobState.HELD})
_ACTIVE = frozenset(
    {
        JobState.PROVISIONING,
        JobState.RUNNING,
        JobState.CHECKPOINTING,
        JobState.PREEMPTED,
        JobState.RECOVERING,
    }
)


#: Every state a job can still leave: pending or active (not terminal).
LIVE_STATES = _PENDING | _ACTIVE


class DeadlineMiss(StrEnum):
    """What to do with a job that can no longer meet its deadline (``on_deadline_miss``).

    ``run``: plan it late, flagged, against a fresh window (see :mod:`budgeteer.core.candidates`);
    ``cancel``: cancel it once the deadline has passed (the result is worthless late).
    """

    RUN = "run"
    CANCEL = "cancel"


class DependencyCondition(StrEnum):
    """When a dependency is satisfied: Slurm's afterok / afterany / afternotok."""

    SUCCESS = "success"
    ANY = "any"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class Dependency:
    """This job may start only once job ``job`` (an id) ended as ``on`` requires."""

    job: str
    on: DependencyCondition = DependencyCondition.SUCCESS


@dataclass(frozen=True, slots=True)
class Resources:
    """What one worker needs and how many workers the job can use.

    ``accelerators`` lists acceptable accelerator families (empty = any GPU in the catalog); a
    family name also matches its variants (``A100`` matches ``A100-80GB``).
    """

    accelerators: tuple[str, ...] = ()
    min_gpu_memory_gib: float = 0.0
    gpus_per_worker: int = 1
    min_workers: int = 1
    max_workers: int = 1


@dataclass(frozen=True, slots=True)
class Work:
    """How much training a job needs.

    Either ``reference_hours`` (A100-40GB GPU-hours) or ``steps`` with measured
    ``steps_per_hour_on`` (steps per hour of *one worker* on each named accelerator).
    """

    reference_hours: float | None = None
    steps: int | None = None
    steps_per_hour_on: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class SwitchRule:
    """ "After ``after_hours`` from the start, if done/total < ``if_progress_below``, go
    ``then``" (only ``on_demand``), e.g. after 1.5 h under 0.5 done → on-demand for good."""

    after_hours: float
    if_progress_below: float
    then: str = "on_demand"


@dataclass(frozen=True, slots=True)
class SpotSettings:
    """Whether the job may run on spot capacity, after how many preemptions it stops trying,
    and its own switch rules (its tier's apply where it gives none). ``avoid``: spot offerings
    (ids) this run is planned without — set by the loop, never stored: the spot markets in a
    drought when the spot decider judged the one its plan waited for not worth waiting out
    (:mod:`budgeteer.scheduler.spot_live`)."""

    allowed: bool = True
    max_preemptions: int | None = None
    switch_rules: tuple[SwitchRule, ...] = ()
    avoid: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DataSource:
    """Where the job's training data lives (``provider/region``), how big it is, and the
    dataset's name (``uri``: a warm instance that ran it holds it; ``None``: unnamed)."""

    location: str
    size_gb: float
    uri: str | None = None


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where to tell about a job: ``url``, and ``secret`` to sign each body (HMAC-SHA256)."""

    url: str
    secret: str | None = None


@dataclass(frozen=True, slots=True)
class Gate:
    """A validation gate: the job passes when its exit code is 0 (``metric`` ``None``), or when
    its last progress report's ``metric`` is at least ``minimum`` / at most ``maximum``. A gate
    that does not pass ends the job ``gate_failed``: its dependents never start, and what its
    pipeline run spent is waste."""

    metric: str | None = None
    minimum: float | None = None
    maximum: float | None = None

    def passes(self, value: float | None) -> bool:
        """Whether ``value`` (the metric's last reported value) passes."""
        if value is None:
            return False
        return (self.minimum is None or value >= self.minimum) and (
            self.maximum is None or value <= self.maximum
        )

    def describe(self) -> str:
        """``auc ≥ 0.81``, ``loss ≤ 0.3``, ``exit code 0``."""
        if self.metric is None:
            return "exit code 0"
        parts = []
        if self.minimum is not None:
            parts.append(f"{self.metric} ≥ {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"{self.metric} ≤ {self.maximum:g}")
        return " and ".join(parts)


@dataclass(frozen=True, slots=True)
class Job:
    """A retraining job in the queue (or finished), as the decision core reads it.

    ``deadline`` is absolute (an ``sla`` was resolved at submission). ``seq`` is the submission
    sequence number: the last tie-breaker of every ordering. ``budget_usd`` caps this run's
    expected cost. ``incremental_reference_hours`` is the cheaper incremental-training variant's
    work, when the job offers one. ``retries`` is how many times a run that fails for its own
    reasons (a non-zero exit, not a preemption) is tried again. ``webhook`` is where to POST its
    terminal state and deadline risk (and the secret that signs the posts), when set.
    ``on_deadline_miss`` says whether a job that can no longer meet its deadline runs late or is
    cancelled once the deadline has passed. ``promote`` marks a pipeline's promotion step: it
    starts only after every validation gate of its pipeline passed, and its success is announced
    to its webhook as ``promoted``.
    """

    id: str
    name: str
    team: str
    tier: Tier
    resources: Resources
    work: Work
    submitted_at: datetime
    seq: int
    state: JobState = JobState.QUEUED
    project: str | None = None
    deadline: datetime | None = None
    budget_usd: float | None = None
    depends_on: tuple[Dependency, ...] = ()
    spot: SpotSettings = field(default_factory=SpotSettings)
    incremental_reference_hours: float | None = None
    data: DataSource | None = None
    checkpoint_interval_seconds: float = 1800.0
    restart_overhead_seconds: float = 300.0
    command: tuple[str, ...] = ()
    retries: int = 0
    early_stop: tuple[float, int] | None = None  # (min_delta, patience); off when None
    webhook: Webhook | None = None
    on_deadline_miss: DeadlineMiss = DeadlineMiss.RUN
    gate: Gate | None = None
    promote: bool = False
