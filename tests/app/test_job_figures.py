"""The pack's figures where monitoring looks (Spark's StreamingQueryProgress, a Prometheus
file), and the pack's reason first from ``OrderedStateful`` and ``orderedkafka``'s load()."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from orderedstream.app.job.figures import (
    OBSERVED_NAME,
    Figures,
    FigureTracker,
    prometheus_text,
    write_metrics_file,
)
from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.monitor import ProgressView, batch_rate
from orderedstream.app.job.pipeline import JobOptions, start_job
from orderedstream.core.errors import OptionError, UserFunctionError, error_summary
from orderedstream.dev.local.jvm import (
    CHECKPOINT_MANAGER_CONF,
    FORKLESS_CHECKPOINT_MANAGER,
    FS_CHECKPOINT_MANAGERS,
    local_checkpoint_manager,
)
from orderedstream.statestore.ordered import OrderedStateful
from tests.fixtures import unique


def test_observed_metrics_and_tracker_figures_from_a_real_run(spark, kafka, s3, tmp_path: Path,
                                                              ) -> None:
    prefix = unique("figs")
    gen = GeneratorOptions(prefix=prefix, sites=1, late_sites=0, partitions=2,
                           sessions_per_site=3, rows=2, updates=6, bad_fraction=0.0, seed=5)
    stats = generate(kafka.bootstrap, gen, create_topic=kafka.create_topic)
    opts = JobOptions(bootstrap=kafka.bootstrap, output=str(tmp_path / "out"),
                      state_location=s3.url(unique("figstate")),
                      checkpoint=str(tmp_path / "ckpt"), topic_pattern=f"{prefix}-.*",
                      storage_options=s3.storage_options, query_name=unique("figq"))
    tracker = FigureTracker(tmp_path / "m.prom", labels={"query": "figs"})
    query, processor = start_job(spark, opts, once=True, on_batch=tracker.on_result)
    try:
        # The local checkpoint's logs are written without Hadoop FileContext's readlink
        # processes nor chmod ones (the shim's manager); the setting was the query's alone
        execution = query._jsq.streamingQuery()
        for log in (execution.offsetLog(), execution.commitLog()):
            manager = log.fileManager()
            assert str(manager.getClass().getName()) == FORKLESS_CHECKPOINT_MANAGER
            assert str(manager.fs().getClass().getName()) == (
                f"{FORKLESS_CHECKPOINT_MANAGER}$ForklessLocalFileSystem")
        assert spark.conf.get(CHECKPOINT_MANAGER_CONF, None) is None
        query.awaitTermination(600)
    finally:
        query.stop()
    assert query.exception() is None
    observed = [p["observedMetrics"][OBSERVED_NAME] for p in query.recentProgress
                if OBSERVED_NAME in (p.get("observedMetrics") or {})]
    assert observed and len(observed) == len(query.recentProgress)

    def total(name: str) -> int:
        return sum(int(m[name]) for m in observed)

    # Spark's own progress carries the ordered stage's figures, equal to what was committed
    table_rows = processor.table().to_arrow().num_rows
    assert total("records") == stats.records
    assert total("output_rows") == table_rows > 0
    assert total("output_files") == len(processor.table().delta_table().file_uris()) > 0
    last = observed[-1]  # state totals over every Kafka partition after the last batch
    assert int(last["state_keys"]) == tracker.figures.state_keys > 0
    assert int(last["state_bytes"]) == tracker.figures.state_bytes > 0
    assert all(float(m["state_commit_ms"]) >= 0 for m in observed)
    assert max(float(m["state_commit_ms"]) for m in observed) > 0
    assert total("restores") >= 0 and total("timeouts") == 0
    assert 1 <= max(int(m["kafka_partitions"]) for m in observed) <= 2
    # ... and the metrics file / live view read the same task results
    figures = tracker.figures
    assert figures.records == stats.records
    assert figures.output_rows == table_rows and figures.output_files == total("output_files")
    assert figures.restores == total("restores")
    assert figures.state_bytes > 0 and figures.last_batch_ms > 0
    assert figures.batches == len(observed)
    text = (tmp_path / "m.prom").read_text()
    assert f'orderedstream_records_total{{query="figs"}} {stats.records}\n' in text
    # the progress line's rate is of Kafka records (Spark's rows are ranges with emit=ranges)
    rate = batch_rate(figures)
    assert round(rate * figures.last_batch_ms / 1000) == int(last["records"]) > 0
    assert f"{rate:,.0f} rec/s" in ProgressView("t", out=lambda _: None).line(
        {"figures": figures, "rate": rate})


def test_prometheus_text_and_atomic_replace(tmp_path: Path) -> None:
    figures = Figures(batches=3, last_batch_id=2, records=10, state_bytes=2048,
                      last_batch_ms=12.5, updated=1.0)
    text = prometheus_text(figures, {"query": 'a"b'})
    assert '# TYPE orderedstream_batches_total counter\n' in text
    assert 'orderedstream_batches_total{query="a\\"b"} 3\n' in text
    assert 'orderedstream_last_batch_duration_ms{query="a\\"b"} 12.500\n' in text
    path = tmp_path / "sub" / "metrics.prom"
    write_metrics_file(path, "one\n")
    write_metrics_file(path, text)
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["metrics.prom"]


def test_orderedstateful_failure_on_an_executor_raises_the_pack_error_first(
        spark, kafka, topic, s3, tmp_path: Path) -> None:
    name = topic(partitions=1)
    assert kafka.produce(name, [(f"k{i}".encode(), b"v") for i in range(3)]) == 3
    batch = (spark.read.format("orderedkafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", name).load())

    def bad(key, record, state):  # three fields for a two-field schema
        return [(key.decode(), "ok", "extra")]

    processor = OrderedStateful(bad, state_location=s3.url(unique("badstate")),
                                output=str(tmp_path / "out"),
                                output_schema="key string, status string",
                                storage_options=s3.storage_options, placement="off")
    with pytest.raises(UserFunctionError) as info:
        processor.process_batch(batch, 0)
    text = str(info.value)
    assert text.startswith("the ordered user function returned rows"), text[:300]
    assert "in batch 0's ordered stage" in text
    # printed, the cause (the error as the executor raised it, no frames) comes first, and
    # Spark's exception is kept as spark_error / the context, its report a note at the end
    assert str(info.value.__cause__).startswith("the ordered user function returned rows")
    assert info.value.__cause__.__traceback__ is None
    spark_error = getattr(info.value, "spark_error", None)
    assert spark_error is not None and info.value.__context__ is spark_error
    assert any(n.startswith("Spark's report:") for n in info.value.__notes__)

    # an exception the user's function raises: its type, message, Kafka partition, offset
    # and key come first (its type does not cross Spark; the report follows)
    def raises(key, record, state):
        if record["offset"] == 1:
            raise ValueError("boom in user code")
        return [(key.decode(), "ok")]

    raising = OrderedStateful(raises, state_location=s3.url(unique("raisestate")),
                              output=str(tmp_path / "out2"),
                              output_schema="key string, status string",
                              storage_options=s3.storage_options, placement="off")
    with pytest.raises(UserFunctionError) as info:
        raising.process_batch(batch, 0)
    assert str(info.value).startswith(
        f"ValueError: boom in user code (raised in the ordered user function at Kafka "
        f"{name}/0 offset 1, key b'k1' (batch 0)) (in batch 0's ordered stage"), \
        str(info.value)[:600]


def test_orderedkafka_options_fail_at_load_with_the_pack_reason(spark, kafka) -> None:
    with pytest.raises(Exception) as info:
        (spark.readStream.format("orderedkafka")
         .option("kafka.bootstrap.servers", kafka.bootstrap)
         .option("subscribe", "t").option("startingOffsets", "bogus").load())
    text = str(info.value)
    assert "UnboundLocalError" not in text
    # Spark's own message: the pack's sentence within the first 300 characters, not after
    # every frame of the worker's traceback.
    assert "OptionError: option 'startingOffsets' = 'bogus' is invalid" in text[:300], text
    summary = error_summary(info.value)
    assert summary is not None and summary.startswith("OptionError: option 'startingOffsets'")
    assert isinstance(OptionError(summary), OptionError)


def test_checkpoint_manager_only_for_local_checkpoints_the_user_left_alone(spark, tmp_path: Path,
                                                                          ) -> None:
    assert local_checkpoint_manager(spark, str(tmp_path)) == FS_CHECKPOINT_MANAGERS[0]
    assert local_checkpoint_manager(spark, f"file://{tmp_path}") == FS_CHECKPOINT_MANAGERS[0]
    assert local_checkpoint_manager(spark, "s3a://bucket/checkpoint") is None
    chosen = ("org.apache.spark.sql.execution.streaming.checkpointing."
              "FileContextBasedCheckpointFileManager")
    spark.conf.set(CHECKPOINT_MANAGER_CONF, chosen)
    try:  # the user's choice stands
        assert local_checkpoint_manager(spark, str(tmp_path)) is None
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)


def test_forkless_checkpoint_manager_gives_the_modes_hadoop_would(spark, tmp_path: Path,
                                                                 ) -> None:
    # Hadoop's umask 077 (the JVM's own is 022): its chmod would make the logs' files 0600 and
    # their folders 0700; the shim's filesystem must set exactly that, with java.nio.
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.txt").write_text("one line\n")
    checkpoint = tmp_path / "cp"
    spark.conf.set(CHECKPOINT_MANAGER_CONF, FORKLESS_CHECKPOINT_MANAGER)
    spark.conf.set("fs.permissions.umask-mode", "077")
    try:
        query = (spark.readStream.format("text").load(str(source)).writeStream.format("noop")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
                 .start())
    finally:
        spark.conf.unset(CHECKPOINT_MANAGER_CONF)
        spark.conf.unset("fs.permissions.umask-mode")
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert query.exception() is None
    manager = query._jsq.streamingQuery().offsetLog().fileManager()
    assert str(manager.fs().getClass().getName()).endswith("$ForklessLocalFileSystem")
    files = [checkpoint / "offsets" / "0", checkpoint / "offsets" / ".0.crc",
             checkpoint / "commits" / "0", checkpoint / "commits" / ".0.crc"]
    assert {f.name: oct(stat.S_IMODE(f.stat().st_mode)) for f in files} == {
        f.name: oct(0o600) for f in files}
    for folder in (checkpoint / "offsets", checkpoint / "commits"):
        assert oct(stat.S_IMODE(folder.stat().st_mode)) == oct(0o700), folder
    assert (checkpoint / "commits" / "0").read_text().startswith("v1")
