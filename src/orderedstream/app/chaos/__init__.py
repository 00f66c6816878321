"""Chaos for the main job: kill -9 the driver, kill Python workers, crash the Kafka broker,
stop S3, and put a fault-injecting proxy in front of S3; then verify nothing was lost,
duplicated or reordered. ``python -m orderedstream.app.chaos --help`` (or ``scripts/chaos``)."""
