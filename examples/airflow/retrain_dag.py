"""Nightly churn retrain through budgeteer (Airflow 3.x).

Put this file in your DAGs folder, install ``budgeteer[airflow]`` where Airflow runs (the
provider registers itself), and create the connection — in the UI (type *budgeteer*: Service URL
and Token) or by environment::

    export AIRFLOW_CONN_BUDGETEER_DEFAULT='{"conn_type": "budgeteer",
        "host": "https://budgeteer.internal:8080", "password": "<team token>"}'

The task submits the pipeline (train → validate, a gate on ``auc`` → publish, a promotion step
that runs only when the gate passed), frees its worker slot while the jobs run (deferrable: the
triggerer polls), and succeeds when every job succeeded — or fails with the reason, e.g.
``validate (…) ended gate_failed: gate failed: auc = 0.78, needs auc ≥ 0.81``. Its XCom is the
jobs with their cost.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG

from budgeteer.integrations.airflow.operators import BudgeteerJobOperator

STEP = {"team": "growth", "resources": {"accelerators": ["A10G"]}, "priority": "P1"}

with DAG(
    "churn_retrain",
    start_date=datetime(2026, 12, 1),
    schedule="0 2 * * *",
    catchup=False,
    tags=["budgeteer"],
) as dag:
    BudgeteerJobOperator(
        task_id="retrain",
        spec={
            "name": "churn-{{ ds_nodash }}",
            "jobs": [
                {
                    **STEP,
                    "name": "train",
                    "sla": "6h",
                    "work": {"reference_hours": 2.0},
                    "command": ["python", "-m", "churn.train", "--date", "{{ ds }}"],
                },
                {
                    **STEP,
                    "name": "validate",
                    "sla": "7h",
                    "work": {"reference_hours": 0.2},
                    "command": ["python", "-m", "churn.validate"],
                    "depends_on": [{"job": "train"}],
                    "gate": {"metric": "auc", "min": 0.81},
                },
                {
                    **STEP,
                    "name": "publish",
                    "sla": "8h",
                    "work": {"reference_hours": 0.05},
                    "command": ["python", "-m", "churn.publish"],
                    "promote": True,
                },
            ],
        },
        poll_interval=60,
        wait_timeout=timedelta(hours=12),
    )
