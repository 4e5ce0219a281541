"""Bundled examples: the demo's jobs and budgets, and a real training script
(``python -m budgeteer.examples.train_linear``)."""
