"""Benchmark workloads (generators) shared by ``budgeteer bench`` and ``benchmarks/``."""
