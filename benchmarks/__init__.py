"""The benchmark suite: run it with ``python -m benchmarks.run`` (see README.md)."""
