"""State retention of the ordered stage (driven by the commit log) and a batch's committed
output as a DataFrame, against real Kafka, real S3 (SeaweedFS) and real Spark (local[2])."""

from __future__ import annotations

import collections
import logging
import sys
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark import cloudpickle

from orderedstream.core.commitlog import CommitLog
from orderedstream.core.errors import CorruptStateError, OptionError, StateNotFoundError
from orderedstream.dev.services.s3 import ACCESS_KEY, SECRET_KEY
from orderedstream.dev.services.spark import s3a_conf
from orderedstream.statestore.manifest import read_manifest
from orderedstream.statestore.ordered import OrderedStateful, RetentionPolicy
from orderedstream.statestore.ordered.plan import (
    BatchPlan,
    PartitionBase,
    PartitionCommit,
    extra_for,
)
from orderedstream.statestore.ordered.retention import OrderedRetention
from orderedstream.statestore.ordered.runner import OrderedTask
from orderedstream.statestore.ordered.state_access import open_store
from orderedstream.statestore.retention import artifact_of
from tests.statestore.ordered.kafka_frames import kafka_batch
from tests.statestore.ordered.order_check import ORDER_SCHEMA, check_order

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _processor(s3: Any, url: str, local: Any, **kwargs: Any) -> OrderedStateful:
    return OrderedStateful(check_order, state_location=f"{url}/state", output=f"{url}/out",
                           output_schema=kwargs.pop("schema", ORDER_SCHEMA),
                           storage_options=s3.storage_options,
                           store_options={"local_dir": str(local)}, **kwargs)


def _state_objects(proc: OrderedStateful) -> set[str]:
    """Manifests and SST files under the state location, relative to it."""
    retention = OrderedRetention(proc.log, proc.options.state_location,
                                 proc.options.storage_options)
    return {rel for rel in retention._listing() if artifact_of(rel) is not None}


def _crashed_attempt(proc: OrderedStateful, frame: Any, batch_id: int) -> list[PartitionCommit]:
    """Run batch ``batch_id``'s ordered stage without creating its commit record: the files
    and state candidates a driver that died (or a zombie task) leaves behind."""
    task = OrderedTask(proc.options, check_order,
                       BatchPlan(batch_id, 0, proc.partition_states()), proc.sink)
    return [PartitionCommit.from_json(r["commit"])
            for r in frame.mapInArrow(task, "commit string").collect()]


def test_retention_keeps_the_last_records_state_and_deletes_old_versions_and_orphans(
        spark, kafka, topic, s3, s3_url, tmp_path) -> None:
    name = topic(partitions=2)
    hot, cold, rounds = 20, 10, 7
    # Partition 0 gets every key once per batch (7 batches); partition 1 only in batches 0-1,
    # then idles: its old version stays the live one, named by every later record.
    kafka.produce(name, [(f"a{k}", str(r)) for r in range(rounds) for k in range(hot)], 0)
    kafka.produce(name, [(f"b{k}", str(r)) for r in range(2) for k in range(cold)], 1)

    def frames(i: int) -> Any:
        ranges = {0: (hot * i, hot * (i + 1))}
        if i < 2:
            ranges[1] = (cold * i, cold * (i + 1))
        return kafka_batch(spark, kafka.bootstrap, name, ranges)

    proc = _processor(s3, s3_url, tmp_path / "local", keep_batches=2,
                      cleanup_interval_batches=3, cleanup_in_background=False)
    results = {}
    crashed: list[PartitionCommit] = []
    before_cleanup = set()
    for i in range(6):
        if i == 4:
            crashed = _crashed_attempt(proc, frames(4), 4)
        if i == 5:
            before_cleanup = _state_objects(proc)
        results[i] = proc.process_batch(frames(i), i)
    # Automatic cleanup ran after batches 2 and 5 only ((batch + 1) % 3 == 0).
    assert [i for i, r in results.items() if r.cleanup is not None] == [2, 5]
    assert results[2].cleanup.manifests_deleted >= 1
    assert results[5].cleanup.oldest_retained_batch == 4
    after_cleanup = _state_objects(proc)
    assert len(after_cleanup) < len(before_cleanup)

    # The crashed attempt of batch 4 (never named by a record, batch id <= latest): gone.
    attempt = crashed[0].manifest.rsplit("/", 1)[-1].split("-", 1)[1][:12]
    assert any(attempt in rel for rel in before_cleanup)
    assert not any(attempt in rel for rel in after_cleanup)

    # An attempt of the NEXT batch is running: its candidate is never touched.
    in_flight = _crashed_attempt(proc, frames(6), 6)
    explicit = proc.cleanup_state()
    assert explicit.latest_batch == 5 and explicit.in_flight >= 1
    remaining = _state_objects(proc)
    in_flight_manifest = f"topic={name}/{in_flight[0].manifest}"
    assert in_flight_manifest in remaining

    # Exactly the manifests the last 2 records name (p0 at 4, 5; idle p1 at 1) remain.
    named = {f"topic={name}/{base.manifest}" for b in (4, 5)
             for base in proc.partition_states(b).values()}
    assert [proc.partition_states(b)[f"{name}/0"].version for b in (4, 5)] == [4, 5]
    assert proc.partition_states(5)[f"{name}/1"].version == 1
    manifests = {rel for rel in remaining if artifact_of(rel)[0] == "manifests"}
    assert manifests == named | {in_flight_manifest}
    # Every file a retained manifest references survives, including files shared with (and
    # named after) batches older than the retained window (incremental snapshots).
    fs, root = fsspec.core.url_to_fs(proc.options.state_location, skip_instance_cache=True,
                                     **s3.storage_options)
    referenced = {f"topic={name}/{e.remote}" for rel in named
                  for e in read_manifest(fs, root, rel).files if e.remote}
    assert referenced <= remaining
    assert any(artifact_of(rel)[1] < 4 for rel in referenced)
    files = {rel for rel in remaining if artifact_of(rel)[0] == "files"}
    assert {rel for rel in files if artifact_of(rel)[1] <= 5} == referenced

    # Old state is gone with a clear error; retained state reads back.
    with pytest.raises(CorruptStateError, match="retention"):
        dict(proc.read_state(name, 0, batch_id=2))
    assert dict(proc.read_state(name, 0, batch_id=4)) == {f"a{k}".encode(): 4
                                                           for k in range(hot)}

    # A replay of a committed batch is skipped, its output still readable.
    replay = proc.process_batch(frames(2), 2)
    assert replay.skipped and replay.output_df(spark).count() == hot

    # A restart on a fresh machine (empty local dir) restores from the latest record.
    fresh = _processor(s3, s3_url, tmp_path / "fresh", keep_batches=2)
    nxt = fresh.process_batch(frames(6), 6)
    assert not nxt.skipped and nxt.restores == 1
    assert dict(fresh.read_state(name, 0)) == {f"a{k}".encode(): 6 for k in range(hot)}
    assert dict(fresh.read_state(name, 1)) == {f"b{k}".encode(): 1 for k in range(cold)}
    out = fresh.table().to_arrow()
    assert out.num_rows == hot * rounds + cold * 2
    assert pc.sum(out["violation"]).as_py() == 0
    assert len(set(zip(out["partition"].to_pylist(), out["offset"].to_pylist(),
                       strict=True))) == out.num_rows


def test_batch_output_df_is_exactly_the_batch_committed_rows(spark, kafka, topic, s3, s3_url,
                                                            tmp_path) -> None:
    name = topic(partitions=2)
    keys, rounds = 30, 3
    for p in (0, 1):
        kafka.produce(name, [(f"k{p}-{k}", str(r)) for r in range(rounds) for k in range(keys)],
                      p)

    def frames(i: int) -> Any:
        return kafka_batch(spark, kafka.bootstrap, name,
                           {p: (keys * i, keys * (i + 1)) for p in (0, 1)})

    # Hive-partitioned output: partition values come back typed, as committed.
    proc = _processor(s3, s3_url, tmp_path / "local", writer_options={"partitionBy": "seq"})
    proc.process_batch(frames(0), 0)
    orphans = _crashed_attempt(proc, frames(1), 1)  # files on S3 no record lists
    assert sum(c.output_rows for c in orphans) == 2 * keys
    first = proc.process_batch(frames(1), 1)
    df = first.output_df(spark)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("partition", "int"), ("offset", "bigint"), ("seq", "bigint"),
        ("violation", "int")]
    rows = sorted((bytes(r.key), r.partition, r.offset, r.seq, r.violation)
                  for r in df.collect())
    expected = sorted((f"k{p}-{k}".encode(), p, keys + k, 1, 0)
                      for p in (0, 1) for k in range(keys))
    assert rows == expected  # batch 1 only: not batch 0, not the crashed attempt's copy
    # The table agrees: batch 1's rows are the table at version 1 minus version 0.
    table = proc.table()
    at1 = collections.Counter(table.to_arrow(first.record.version)["offset"].to_pylist())
    at0 = collections.Counter(table.to_arrow(first.record.version - 1)["offset"].to_pylist())
    assert sorted((at1 - at0).elements()) == sorted(r[2] for r in expected)

    # A replay (Spark re-runs batch 1 after a crash): skipped, the same rows come back.
    again = _processor(s3, s3_url, tmp_path / "local").process_batch(frames(1), 1)
    assert again.skipped
    assert sorted((bytes(r.key), r.partition, r.offset, r.seq, r.violation)
                  for r in again.output_df(spark).collect()) == expected
    assert proc.batch_output(0, spark).count() == 2 * keys
    with pytest.raises(StateNotFoundError, match="not committed"):
        proc.batch_output(5, spark)
    empty = proc.process_batch(frames(2).limit(0), 2)
    assert empty.output_df(spark).count() == 0

    # Spark's own Parquet reader (s3a, hadoop-aws on the test session) reads the same rows.
    if "hadoop-aws" not in (spark.conf.get("spark.jars", "") or ""):
        pytest.skip("hadoop-aws is not on this Spark session (no Maven)")
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in s3a_conf(s3.endpoint, ACCESS_KEY, SECRET_KEY, prefix="").items():
        hadoop.set(key, value)
    native = first.output_df(spark, engine="spark")
    assert native.schema == df.schema
    assert sorted((bytes(r.key), r.partition, r.offset, r.seq, r.violation)
                  for r in native.collect()) == expected


def test_the_automatic_cleanup_runs_beside_the_next_batches(
        spark, kafka, topic, s3, s3_url, tmp_path, caplog) -> None:
    """The default: a due batch starts the cleanup in a driver thread and returns; what it
    deleted is what the last record leaves to keep; the processor still pickles."""
    caplog.set_level(logging.INFO, logger="orderedstream.statestore.ordered")
    name = topic(partitions=1)
    kafka.produce(name, [(f"k{k}", str(r)) for r in range(4) for k in range(10)], 0)
    proc = _processor(s3, s3_url, tmp_path / "local", keep_batches=1,
                      cleanup_interval_batches=2)
    assert proc.retention.background and proc.wait_for_cleanup(0) is None  # none yet

    def batch(i: int) -> Any:
        frame = kafka_batch(spark, kafka.bootstrap, name, {0: (10 * i, 10 * (i + 1))})
        return proc.process_batch(frame, i)

    done = {}
    for i in range(4):
        assert batch(i).cleanup is None  # due after 1 and 3: started, not awaited
        if i in (1, 3):
            done[i] = proc.wait_for_cleanup(120)
    assert done[1] is not None and done[1].latest_batch == 1
    assert done[3] is not None and done[3].latest_batch == 3
    assert done[3].oldest_retained_batch == 3 and done[3].manifests_deleted >= 2
    ran_in = {r.threadName for r in caplog.records if "ordered state cleanup at" in r.message}
    assert ran_in == {"orderedstream-cleanup-b1", "orderedstream-cleanup-b3"}
    named = {f"topic={name}/{base.manifest}" for base in proc.partition_states(3).values()}
    manifests = {rel for rel in _state_objects(proc) if artifact_of(rel)[0] == "manifests"}
    assert manifests == named
    assert dict(proc.read_state(name, 0)) == {f"k{k}".encode(): 3 for k in range(10)}
    again = cloudpickle.loads(cloudpickle.dumps(proc))  # Spark Connect pickles foreachBatch
    assert again.cleanup_state().latest_batch == 3
    # The cleanup thread's log and state filesystems are its own instances, listing caches
    # included: fsspec's shared one (the batches' log) is never updated from two threads.
    retention = proc._cleanups._retention
    assert retention is not None
    shared = fsspec.filesystem("s3", **proc.options.storage_options)
    assert proc.log.fs is shared and retention.log.fs is not shared
    assert retention.log.fs.dircache is not shared.dircache
    assert retention.fs.filesystem() is not shared


def test_retention_options_are_checked_and_generic_cleanup_is_refused(tmp_path) -> None:
    url = f"file://{tmp_path}"
    schema = pa.schema([("key", pa.binary())])
    with pytest.raises(OptionError, match="keep_batches=0"):
        OrderedStateful(check_order, state_location=f"{url}/s", output=f"{url}/o",
                        output_schema=schema, keep_batches=0)
    with pytest.raises(OptionError, match="cleanup_interval_batches"):
        RetentionPolicy(keep_batches=5, cleanup_interval_batches=0)
    with pytest.raises(OptionError, match=r"cleanup_in_background='yes'.*True"):
        OrderedStateful(check_order, state_location=f"{url}/s", output=f"{url}/o",
                        output_schema=schema, cleanup_in_background="yes")  # type: ignore[arg-type]
    proc = OrderedStateful(check_order, state_location=f"{url}/s", output=f"{url}/o",
                           output_schema=schema, store_options={"keep_last": 7},
                           cleanup_interval_batches=None)
    assert proc.retention.keep_batches == 7 and not proc.retention.due(9)
    assert RetentionPolicy(keep_batches=1, cleanup_interval_batches=5).due(4)
    assert proc.cleanup_state().latest_batch is None  # nothing committed: nothing to do
    # The generic retention would only know the versions handed to the store: refused.
    with pytest.raises(OptionError, match="cleanup_state"):
        open_store(proc.options, "t", {(0, 3): "p=0/manifests/3-x.json"}).cleanup(0)


def test_a_retained_manifest_removed_by_hand_stops_cleanup_naming_it(s3, s3_url) -> None:  # type: ignore[no-untyped-def]
    log = CommitLog(f"{s3_url}/out", s3.storage_options)
    epoch = log.claim_epoch("retention-test")
    manifest = "p=0/manifests/0-gone.json"
    log.commit(0, epoch, [], extra=extra_for({"t/0": PartitionBase(version=0, manifest=manifest)},
                                             0, []))
    kept = f"{s3_url}/state/topic=t/p=0/sst/0-orphan.sst"  # no record names it: deletable
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3.storage_options)
    fs.pipe_file(kept, b"sst")
    retention = OrderedRetention(log, f"{s3_url}/state", s3.storage_options)
    with pytest.raises(CorruptStateError, match=rf"topic=t/{manifest} is named by a retained "
                                                r"commit record .* does not exist"):
        retention.run(keep_batches=1)
    assert fs.exists(kept)  # nothing deleted
    # A store that fails (here: nothing listens) is not called corruption (CorruptStateError
    # is no OSError): the next cleanup retries.
    unreachable = {**s3.storage_options, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
                   "config_kwargs": {"retries": {"max_attempts": 1}}}
    failing = OrderedRetention(log, f"{s3_url}/state", unreachable)
    with pytest.raises(OSError, match=rf"topic=t/{manifest} \(named by a retained commit "
                                      r"record .*\) could not be read: .*the next one retries"
                       ) as failed:
        failing.run(keep_batches=1)
    assert "does not exist" not in str(failed.value)
    assert fs.exists(kept)


def test_a_cleanup_reads_about_keep_batches_versions_of_the_log(tmp_path) -> None:
    """``retained_batch_records`` finds the newest batch records among maintenance versions
    and reads only about as many versions as it keeps, which the log's cache then holds (a
    cleanup every few batches reads each version once)."""
    from orderedstream.core.datafile import DataFile
    from orderedstream.statestore.ordered.retention import (
        retained_batch_records,
        retention_window,
    )

    url = str(tmp_path / "table")
    log = CommitLog(url)
    epoch = log.claim_epoch("q")
    for batch in range(40):
        log.commit(batch, epoch, [DataFile(f"f{batch}.parquet", 10, 1, {})])
        if batch % 10 == 9:  # a compaction every 10 batches: a version without a batch id
            log.commit_change(log.latest_version(), [], [])
    fresh = CommitLog(url, cache_records=1000)
    assert [r.batch_id for r in retained_batch_records(fresh, 5)] == list(range(35, 40))
    assert len(fresh._cache) <= retention_window(5)  # noqa: SLF001 - versions read
    assert [r.batch_id for r in retained_batch_records(fresh, 38)] == list(range(2, 40))
    assert [r.batch_id for r in retained_batch_records(fresh, 100)] == list(range(40))
    assert retained_batch_records(CommitLog(str(tmp_path / "empty")), 5) == []
