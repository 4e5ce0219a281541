"""The public job and budget schema (Pydantic models at the edge) and their conversion to domain
records. The same schema serves the CLI files, the API and the simulator."""

from budgeteer.spec.batch import jobs_from_specs
from budgeteer.spec.budget import BudgetSpec, SpendSpec, budget_from_spec, spend_from_spec
from budgeteer.spec.files import load_budgets_file, load_jobs_file
from budgeteer.spec.job import JobSpec, job_from_spec, parse_duration

__all__ = [
    "BudgetSpec",
    "JobSpec",
    "SpendSpec",
    "budget_from_spec",
    "job_from_spec",
    "jobs_from_specs",
    "load_budgets_file",
    "load_jobs_file",
    "parse_duration",
    "spend_from_spec",
]
