"""Ordered stateful processing of Kafka partitions on top of the state store (no shuffle).

``OrderedStateful`` runs each Kafka partition's records of a micro-batch through a user
function in offset order on the executors, with per-key state (``GroupState``) and timeouts;
output and state versions are published together in one commit per batch, so a replayed
batch is skipped and output and state never disagree. Usage: docs/ordered-stage.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from orderedstream.statestore.ordered.group_state import NO_TIMESTAMP, GroupState
from orderedstream.statestore.ordered.options import OrderedOptions, to_arrow_schema
from orderedstream.statestore.ordered.plan import BatchPlan, PartitionBase, PartitionCommit
from orderedstream.statestore.ordered.timeouts import (
    EventTimeTimeout,
    NoTimeout,
    ProcessingTimeTimeout,
    parse_duration_ms,
)

if TYPE_CHECKING:
    from orderedstream.statestore.ordered.batch import BatchResult
    from orderedstream.statestore.ordered.processor import OrderedStateful
    from orderedstream.statestore.ordered.retention import RetentionPolicy, RetentionResult

# Driver-side parts load on first use: executor tasks import this package for the runner, and
# the driver's modules pull in the sink's table reader (pyarrow.dataset, pandas), a cost on
# every Python worker's start (docs/decisions/0014-no-pandas-import.md).
_LAZY = {"BatchResult": "batch", "OrderedStateful": "processor",
         "RetentionPolicy": "retention", "RetentionResult": "retention"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

__all__ = [
    "NO_TIMESTAMP",
    "BatchPlan",
    "BatchResult",
    "EventTimeTimeout",
    "GroupState",
    "NoTimeout",
    "OrderedOptions",
    "OrderedStateful",
    "PartitionBase",
    "PartitionCommit",
    "ProcessingTimeTimeout",
    "RetentionPolicy",
    "RetentionResult",
    "parse_duration_ms",
    "to_arrow_schema",
]
