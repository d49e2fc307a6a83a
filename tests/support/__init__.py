"""Helpers shared by the end-to-end tests and the benchmarks (stand-ins, process runners)."""
