"""The pack's main job (seed 002): snapshot/update capture sessions from many Kafka topics,
rebuilt per session in offset order, landed exactly once in S3 Parquet.

- ``messages``: the wire format of capture sessions and its parser (bad input -> reasons).
- ``generator``: writes capture sessions to ``<prefix>-<site>`` topics (demos, tests, benchmarks).
- ``verify``: recomputes the expected change log from the topics alone and compares.
"""
