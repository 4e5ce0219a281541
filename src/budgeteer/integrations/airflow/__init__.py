"""The Airflow provider (Airflow 3.x): :class:`~.hooks.BudgeteerHook` (a connection to a
budgeteer service: URL and token), :class:`~.operators.BudgeteerJobOperator` (submits a job or a
pipeline and defers to :class:`~.triggers.BudgeteerJobTrigger`, which polls until every job
ended). Registered with Airflow through the ``apache_airflow_provider`` entry point
(:func:`get_provider_info`); this module imports nothing of Airflow, so discovery is cheap."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager reads (``provider_info.schema.json``)."""
    return {
        "package-name": "budgeteer",
        "name": "budgeteer",
        "description": "Submit retraining jobs and pipelines to a budgeteer service and wait "
        "for them (deferrable).",
        "versions": ["0.1.0"],
        "integrations": [
            {
                "integration-name": "budgeteer",
                "external-doc-url": "https://github.com/budgeteer/budgeteer/blob/main/docs/integrations.md",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "budgeteer",
                "python-modules": ["budgeteer.integrations.airflow.operators"],
            }
        ],
        "triggers": [
            {
                "integration-name": "budgeteer",
                "python-modules": ["budgeteer.integrations.airflow.triggers"],
            }
        ],
        "hooks": [
            {
                "integration-name": "budgeteer",
                "python-modules": ["budgeteer.integrations.airflow.hooks"],
            }
        ],
        "connection-types": [
            {
                "hook-class-name": "budgeteer.integrations.airflow.hooks.BudgeteerHook",
                "connection-type": "budgeteer",
            }
        ],
    }
