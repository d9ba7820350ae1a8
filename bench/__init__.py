"""Benchmarks: each has a reproducible command in bench/README.md."""
