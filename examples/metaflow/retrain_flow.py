"""A Metaflow flow whose training step runs on budgeteer's compute.

    export BUDGETEER_URL=http://127.0.0.1:8080 BUDGETEER_TOKEN=<team token>
    python examples/metaflow/retrain_flow.py run

The ``train`` step submits the job with an idempotency key from the run and task (a resumed
task finds its job), waits, and keeps the jobs with their cost as the artifact ``jobs``; a job
that does not succeed fails the step with its reason.
"""

from metaflow import FlowSpec, step

from budgeteer.integrations.metaflow import run_on_budgeteer


class ChurnRetrain(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @step
    def train(self):
        self.jobs = run_on_budgeteer(
            {
                "name": "churn-retrain",
                "team": "growth",
                "priority": "P2",
                "sla": "8h",
                "work": {"reference_hours": 1.0},
                "command": ["python", "-m", "budgeteer.examples.train_linear", "--epochs", "5"],
            }
        )
        self.next(self.end)

    @step
    def end(self):
        for job in self.jobs:
            print(f"{job['name']}: {job['state']}, ${job['cost_usd']}")


if __name__ == "__main__":
    ChurnRetrain()
