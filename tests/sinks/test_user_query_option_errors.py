"""A misspelled sink option, as a user meets it: in the exception their own query raises
(``start()``, ``awaitTermination()``, ``save()``), the pack's sentence comes right after
Spark's own prefix, names the option, suggests the close name and lists what is accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orderedstream.sinks.datasource import FencedParquetDataSource
from orderedstream.sinks.deltasource import FencedDeltaDataSource
from tests.sinks.test_spark_sinks import make_input, stream

# Spark's own prefix before a Python Data Source's error is about 315 characters
# ("[STREAM_FAILED] Query [id = ..., runId = ...] terminated with exception: ...").
REASON_WITHIN = 400


def reason_index(exc: BaseException, sentence: str) -> int:
    """Where ``sentence`` starts in what the user sees of ``exc`` (``str()``, and pyspark's
    ``getMessage()`` when it has one): the later of the two."""
    texts = [str(exc)]
    message = getattr(exc, "getMessage", None)
    if callable(message):
        texts.append(str(message()))
    positions = []
    for text in texts:
        assert sentence in text, text[:3000]
        positions.append(text.index(sentence))
    return max(positions)


def _sentence(sink: str) -> str:
    # Spark hands a Data Source its option names lower-cased
    return (f"OptionError: unknown {sink} option 'partitonby' (did you mean 'partitionBy'?); "
            "accepted: ")


@pytest.mark.parametrize("sink", ["fencedparquet", "fenceddelta"])
def test_a_misspelled_option_of_a_streaming_sink_is_named_first(spark, s3_table, tmp_path: Path,
                                                                 sink: str) -> None:
    spark.dataSource.register(FencedParquetDataSource)
    spark.dataSource.register(FencedDeltaDataSource)
    url, opts = s3_table(sink)
    source = make_input(tmp_path / "in", 1)
    with pytest.raises(Exception) as failed:
        query = (stream(spark, source).writeStream.format(sink).option("path", url)
                 .option("storageOptions", json.dumps(opts)).option("partitonBy", "k")
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    at = reason_index(failed.value, _sentence(sink))
    assert at <= REASON_WITHIN, str(failed.value)[:3000]
    text = str(failed.value)
    print(f"reason at {at} of {len(text)}: {sink} stream")
    for accepted in ("compression", "targetFileSize", "writerId"):
        assert accepted in text[at:at + 400]


@pytest.mark.parametrize("sink", ["fencedparquet", "fenceddelta"])
def test_a_misspelled_option_of_a_batch_write_is_named_first(spark, tmp_path: Path,
                                                             sink: str) -> None:
    spark.dataSource.register(FencedParquetDataSource)
    spark.dataSource.register(FencedDeltaDataSource)
    frame: Any = spark.range(3).withColumnRenamed("id", "k")
    with pytest.raises(Exception) as failed:
        (frame.write.format(sink).option("path", str(tmp_path / "t")).option("partitonBy", "k")
         .mode("append").save())
    at = reason_index(failed.value, _sentence(sink))
    assert at <= REASON_WITHIN, str(failed.value)[:3000]
    print(f"reason at {at} of {len(str(failed.value))}: {sink} batch write")
