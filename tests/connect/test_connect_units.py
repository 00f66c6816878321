"""The Connect paths' pure parts: the plan's job tag, the checkpoint's query id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orderedstream.core.errors import CorruptLogError, OrderViolationError
from orderedstream.core.sparkmode import is_connect
from orderedstream.sinks.deltaforeach import checkpoint_query_id
from orderedstream.statestore.ordered.inplan import (
    decode_plan,
    encode_plan,
    plan_from_tags,
    plan_tag,
)
from orderedstream.statestore.ordered.plan import BatchPlan

pytestmark = pytest.mark.unit

SESSION = "SparkConnect_SessionTag_User__Session_1b2c_Tag_"


def test_the_plan_travels_in_a_tag_without_commas_and_is_found_by_its_stage() -> None:
    encoded = encode_plan(BatchPlan(batch_id=7, processing_time_ms=1234), dry_run=True)
    tag = plan_tag("orders", encoded)
    assert "," not in tag
    other = plan_tag("orders-b", encode_plan(BatchPlan(batch_id=9, processing_time_ms=1),
                                             dry_run=False))
    tags = ",".join(["SparkConnect_OperationTag_User__Session_1b2c_Operation_9f",
                     SESSION + tag, SESSION + other, "spark-session-1-execution-root-id-0"])
    found = plan_from_tags(tags, "orders")
    assert found is not None
    plan, dry_run = decode_plan(found)
    assert (plan.batch_id, plan.processing_time_ms, dry_run) == (7, 1234, True)
    assert decode_plan(plan_from_tags(tags, "orders-b") or "")[0].batch_id == 9
    assert plan_from_tags(tags, "sessions") is None
    assert plan_from_tags(None, "orders") is None


def test_two_plans_for_one_stage_in_a_job_are_refused() -> None:
    first = plan_tag("orders", encode_plan(BatchPlan(batch_id=1, processing_time_ms=1),
                                           dry_run=False))
    second = plan_tag("orders", encode_plan(BatchPlan(batch_id=2, processing_time_ms=1),
                                            dry_run=False))
    with pytest.raises(OrderViolationError, match="carries 2 batch plans"):
        plan_from_tags(f"{SESSION}{first},{SESSION}{second}", "orders")


def test_the_query_id_comes_from_the_checkpoint_metadata(tmp_path: Path) -> None:
    assert checkpoint_query_id(str(tmp_path)) is None  # no metadata yet
    (tmp_path / "metadata").write_text(json.dumps({"id": "5c1e-42"}) + "\n")
    assert checkpoint_query_id(str(tmp_path)) == "5c1e-42"
    assert checkpoint_query_id(f"file:{tmp_path}") == "5c1e-42"
    (tmp_path / "metadata").write_text("not json\n")
    with pytest.raises(CorruptLogError, match="metadata is not a Spark streaming"):
        checkpoint_query_id(str(tmp_path))


def test_a_plain_object_is_not_a_connect_session() -> None:
    assert not is_connect(object())
