"""Benchmarks: this pack against Spark's own equivalent, in one run, on the same data.

``scripts/bench`` (or ``python -m benchmarks.run``) runs every case in its own process (its own
JVM and Spark settings, its own peak-RSS reading) against one set of local services, and writes
``report.md``, ``report.json`` and PNG charts. Ratios come from the same run.
"""
