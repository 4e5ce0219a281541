"""Property-based fuzzing of the served OpenAPI spec with schemathesis: whatever the generated
request (valid or not, any token the caller may hold), the API never answers 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from api_world import ADMIN, World, job_spec, make_world


@pytest.fixture(scope="module")
def fuzz_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    w = make_world(f"sqlite:///{tmp / 'fuzz.db'}", tmp)
    # something to find: a job of each team and a budget
    w.http.post("/v1/jobs", json=job_spec(), headers=w.auth(w.growth))
    w.http.post("/v1/jobs", json=job_spec(team="search"), headers=w.auth(w.search))
    w.http.post(
        "/v1/budgets",
        json={"id": "growth-monthly", "scope": {"team": "growth"}, "limit_usd": 500},
        headers=w.auth(ADMIN),
    )
    yield w
    w.store.close()


def test_no_server_errors(fuzz_world: World) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_world.http.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12  # every documented endpoint is fuzzed
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def no_5xx(case: Any) -> None:
            for token in (ADMIN, fuzz_world.growth):
                response = case.call(headers=fuzz_world.auth(token))
                assert response.status_code < 500, (case.method, case.path, response.text)

        no_5xx()
