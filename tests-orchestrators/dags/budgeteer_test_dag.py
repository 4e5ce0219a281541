"""A DAG for the Airflow test: ``retrain`` (one job, succeeds) and ``gated`` (a pipeline whose
validation gate reads ``GATE_AUC`` from its report; fails below 0.81), both deferrable; run with
``dag.test()`` and print each task's state and XCom as JSON on the last line."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

from airflow.sdk import DAG

from budgeteer.integrations.airflow.operators import BudgeteerJobOperator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import job, reporting

auc = float(os.environ.get("GATE_AUC", "0.9"))

with DAG("budgeteer_test", start_date=datetime(2026, 1, 1), schedule=None, catchup=False) as dag:
    BudgeteerJobOperator(task_id="retrain", spec=job("churn"), poll_interval=0.5)
    BudgeteerJobOperator(
        task_id="gated",
        spec={
            "name": "fraud",
            "jobs": [
                job("train"),
                job(
                    "validate",
                    reporting("auc", auc),
                    depends_on=[{"job": "train"}],
                    gate={"metric": "auc", "min": 0.81},
                ),
            ],
        },
        poll_interval=0.5,
    )

if __name__ == "__main__":
    run = dag.test()
    tis = {ti.task_id: ti for ti in run.get_task_instances()}
    out = {
        "run": str(run.state),
        "tasks": {
            name: {"state": str(ti.state), "xcom": ti.xcom_pull(task_ids=name)}
            for name, ti in tis.items()
        },
    }
    print(json.dumps(out, default=str))
