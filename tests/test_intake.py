"""The one submit path (API and CLI): specs → jobs → store, numbered after what is stored,
renamed with their dependencies, atomic, every error named."""

from __future__ import annotations

import pytest

from budgeteer.errors import SpecErrors
from budgeteer.intake import submit_specs
from budgeteer.spec.job import JobSpec
from budgeteer.store import MemoryStore
from builders import NOW

KNOWN = ["A100", "T4"]


def _spec(name: str, **extra: object) -> JobSpec:
    return JobSpec.parse(
        {"name": name, "team": "t", "work": {"reference_hours": 1}, "command": ["true"], **extra}
    )


def test_later_submissions_are_numbered_after_what_is_stored_and_renamed_whole() -> None:
    store = MemoryStore()
    submit_specs(store, [_spec("a"), _spec("b")], now=NOW, known_accelerators=KNOWN)
    result = submit_specs(
        store,
        [_spec("prep"), _spec("train", depends_on=[{"job": "prep", "on": "success"}])],
        now=NOW,
        known_accelerators=KNOWN,
        ids=lambda job: f"run7.{job.id}",
    )
    assert result.job_ids == ("run7.prep", "run7.train")
    assert [store.job(i).seq for i in result.job_ids] == [2, 3]  # after a (0) and b (1)
    assert [d.job for d in store.job("run7.train").depends_on] == ["run7.prep"]


def test_a_bad_batch_stores_nothing_and_names_each_field() -> None:
    store = MemoryStore()
    with pytest.raises(SpecErrors) as err:
        submit_specs(
            store,
            [_spec("x", sla="4h"), _spec("y", resources={"accelerators": ["Z9"]})],
            now=NOW,
            known_accelerators=KNOWN,
        )
    assert [e.field for e in err.value.errors] == ["jobs[1].resources.accelerators[0]"]
    assert store.jobs() == []
    with pytest.raises(SpecErrors) as one:
        submit_specs(
            store,
            [_spec("z", depends_on=[{"job": "z", "on": "success"}])],
            now=NOW,
            known_accelerators=KNOWN,
            single=True,
        )
    assert one.value.errors[0].field == "depends_on[0].job"  # no jobs[0] for a single job
