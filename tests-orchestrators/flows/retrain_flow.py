"""A Metaflow flow for the test: ``train`` runs a pipeline through budgeteer whose validation
gate reads ``auc`` (a Parameter) from its report; the jobs are the step's artifact."""

import os
import sys

from metaflow import FlowSpec, Parameter, step

from budgeteer.integrations.metaflow import run_on_budgeteer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import job, reporting


class RetrainFlow(FlowSpec):
    auc = Parameter("auc", type=float, default=0.9)

    @step
    def start(self):
        self.next(self.train)

    @step
    def train(self):
        self.jobs = run_on_budgeteer(
            {
                "name": "mf-churn",
                "jobs": [
                    job("train"),
                    job(
                        "validate",
                        reporting("auc", self.auc),
                        depends_on=[{"job": "train"}],
                        gate={"metric": "auc", "min": 0.81},
                    ),
                ],
            },
            poll_seconds=0.5,
        )
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    RetrainFlow()
