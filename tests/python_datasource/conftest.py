"""The orderedkafka tests use the shared broker and Spark of tests/fixtures.py (registered by
tests/conftest.py); their helpers are in ``tests.python_datasource.source_helpers``."""
