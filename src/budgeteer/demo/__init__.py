"""``budgeteer demo``: a scripted morning of retraining against a real spot trace (see run.py)."""
