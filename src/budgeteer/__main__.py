"""``python -m budgeteer`` runs the CLI."""

from budgeteer.cli import main

main()
