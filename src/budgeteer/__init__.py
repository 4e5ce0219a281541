"""budgeteer: a compute budget scheduler for ML retraining."""

__version__ = "0.1.0"
