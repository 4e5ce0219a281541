"""A Kubeflow Pipelines (kfp 2.x) pipeline whose training runs on budgeteer's compute.

Run it locally (no cluster) against a served budgeteer::

    BUDGETEER_TOKEN=<team token> python examples/kfp/retrain_pipeline.py http://127.0.0.1:8080

On a cluster, compile it (``kfp.compiler.Compiler().compile(retrain, "retrain.yaml")``) with a
component image that holds budgeteer (``make_component(packages_to_install=["budgeteer"])``)
and the token from a Kubernetes secret (``kfp-kubernetes``' ``use_secret_as_env``).
"""

# no ``from __future__ import annotations``: kfp reads the pipeline's annotations as types
import json
import sys

from kfp import dsl, local

from budgeteer.integrations.kfp import budgeteer_job

SPEC = {
    "name": "fraud-retrain",
    "team": "risk",
    "priority": "P1",
    "sla": "4h",
    "work": {"reference_hours": 0.5},
    "command": ["python", "-m", "budgeteer.examples.train_linear", "--epochs", "5"],
}


@dsl.pipeline(name="fraud-retrain")
def retrain(url: str, spec_json: str) -> None:
    budgeteer_job(url=url, spec_json=spec_json, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)


if __name__ == "__main__":
    local.init(runner=local.SubprocessRunner(use_venv=False))
    retrain(url=sys.argv[1], spec_json=json.dumps(SPEC))
