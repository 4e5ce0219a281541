"""The example training script, runnable from a checkout: it is
:mod:`budgeteer.examples.train_linear` (shipped in the package, so ``make demo`` and installed
copies run the very same code)."""

from budgeteer.examples.train_linear import main

if __name__ == "__main__":
    main()
