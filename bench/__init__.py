"""Benchmarks for Tollgate (run as modules, e.g. `python -m bench.overhead`)."""
