"""Test helper: the per-key order check the ordered-stage tests run as their user function.

Per key, values are 0, 1, 2, ... in production order; each output row says whether the record
continued its key's sequence, so anything lost, duplicated or reordered shows as a violation.
Registered to travel to executors by value (this module is not importable there).
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

ORDER_SCHEMA = "key binary, partition int, offset long, seq long, violation int"


def check_order(key: Any, record: Any, state: Any) -> list[tuple[Any, ...]]:
    """One row per record: ``violation`` is 1 unless its value is the key's last value + 1."""
    seq = int(record["value"])
    previous = state.get_option(-1)
    state.update(seq)
    return [(key, record["partition"], record["offset"], seq, 0 if seq == previous + 1 else 1)]
