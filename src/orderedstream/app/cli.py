"""``orderedstream``: the pack's command line.

- ``demo``: the main job on embedded services (local Kafka, S3 and Spark), then verified;
- ``run``: the main job against given Kafka and storage, until stopped;
- ``sink ...``: inspect and maintain a fenced Parquet table (``orderedstream.sinks.cli``);
- ``shim-jar``: the bundled JVM shim's path, for ``spark-submit --jars``.

S3 credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, an instance role): never from the command line,
where every user of the machine can read them in the process list.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from orderedstream.app.job.demo import run_demo
from orderedstream.app.job.generator import GeneratorOptions
from orderedstream.app.job.pipeline import JobMonitor, JobOptions, start_job
from orderedstream.app.replay_cli import register as register_replay_commands
from orderedstream.app.table_cli import register as register_table_commands
from orderedstream.core.errors import OrderedStreamError
from orderedstream.core.jvm import bundled_jar
from orderedstream.core.storage import s3_endpoint_options
from orderedstream.dev.services.embedded import embedded_services
from orderedstream.dev.services.spark import local_spark_session
from orderedstream.sinks.cli import register as register_sink_commands


def _demo(args: argparse.Namespace) -> int:
    began = time.monotonic()
    with embedded_services(args.bootstrap_servers, args.s3_endpoint, args.workdir,
                           bucket=args.bucket) as endpoints:
        for line in endpoints.started:
            print(f"[demo] started {line}")
        spark = local_spark_session("orderedstream-demo", master=args.master,
                                    tmp_dir=endpoints.workdir / "spark")
        spark.sparkContext.setLogLevel("WARN")
        print(f"[demo] Spark {spark.version} on {args.master}")
        gen = GeneratorOptions(prefix=args.prefix, sites=args.sites, late_sites=1,
                               partitions=args.partitions, sessions_per_site=args.sessions,
                               rows=args.rows, updates=args.updates, seed=args.seed)

        def create_topic(name: str, partitions: int) -> None:
            admin = AdminClient({"bootstrap.servers": endpoints.bootstrap})
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)

        try:
            result = run_demo(spark, endpoints.bootstrap, endpoints.storage_options,
                              f"s3://{args.bucket}/{args.prefix}", endpoints.workdir, gen,
                              create_topic, max_offsets_per_trigger=args.max_offsets_per_trigger)
        finally:
            spark.stop()
    v = result.verification
    print(f"[demo] output: {result.output} (a Delta Lake table, partitioned by kind/site/date; "
          "read it with deltalake, Polars read_delta, DuckDB or Spark with delta-spark)")
    print(f"[demo] {result.batches} batches; {v.checked} changes checked against the topics: "
          f"lost {v.lost}, duplicated {v.duplicated}, out of order {v.out_of_order}; dead letters "
          f"{v.expected_dead_letters - v.dead_letters_missing}/{v.expected_dead_letters}; wrong "
          f"final tables {v.wrong_final_tables}")
    for example in v.examples:
        print(f"[demo]   {example}")
    print(f"[demo] {'VERIFIED' if v.ok else 'FAILED'} in {time.monotonic() - began:.0f}s")
    return 0 if v.ok else 1


def _run(args: argparse.Namespace) -> int:
    """Run the job against given services until stopped (SIGINT/SIGTERM stop it cleanly)."""
    # s3:// URLs: the endpoint (if not AWS) from the command line, credentials from the
    # standard AWS chain; other fsspec URLs need no options.
    storage = s3_endpoint_options(args.s3_endpoint) if args.s3_endpoint else {}
    opts = JobOptions(bootstrap=args.bootstrap_servers, output=args.output,
                      state_location=args.state, checkpoint=args.checkpoint,
                      topic_pattern=args.topic_pattern, storage_options=storage,
                      max_offsets_per_trigger=args.max_offsets_per_trigger, trigger=args.trigger,
                      idle_timeout=args.idle_timeout, output_format=args.output_format)
    if os.environ.get("PYSPARK_GATEWAY_PORT") and args.master is None:
        # Launched by spark-submit: its --master, --conf and --jars configure the session.
        spark = SparkSession.builder.appName("orderedstream-job").getOrCreate()
    else:
        spark = local_spark_session("orderedstream-job", master=args.master or "local[2,4]")
    spark.sparkContext.setLogLevel("WARN")
    query, processor = start_job(spark, opts, once=args.available_now)
    stopping = {"signal": None}

    def stop(signum: int, _frame: object) -> None:
        stopping["signal"] = signum
        print(f"[job] signal {signum}: stopping after the running batch", flush=True)
        query.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with JobMonitor(query, processor, opts, out=lambda line: print(line, flush=True),
                    every=args.progress_every):
        while query.isActive:
            query.awaitTermination(1)
    error = query.exception()
    result = processor.last_result
    print(f"[job] stopped: {0 if result is None else result.batch_id + 1} batches committed"
          f"{'' if error is None else f'; failed: {error}'}", flush=True)
    spark.stop()
    return 1 if error is not None else 0


def _shim_jar(_args: argparse.Namespace) -> int:
    jar = bundled_jar()
    if jar is None:
        print("orderedstream: this installation has no shim jar (build it from a checkout "
              "with 'python -m orderedstream.dev.shim build')", file=sys.stderr)
        return 1
    print(jar)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orderedstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the pipeline on embedded (or given) services")
    demo.add_argument("--bootstrap-servers", help="external Kafka; default: start a local broker")
    demo.add_argument("--s3-endpoint", help="external S3 endpoint; default: start SeaweedFS")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    demo.add_argument("--workdir", type=Path, help="where local services keep data and logs")
    demo.add_argument("--bucket", default="lake", help="S3 bucket for output and state")
    demo.add_argument("--prefix", default="sessions", help="topic prefix (<prefix>-<site>)")
    demo.add_argument("--sites", type=int, default=3, help="sites (topics) at the start")
    demo.add_argument("--partitions", type=int, default=3, help="partitions per topic")
    demo.add_argument("--sessions", type=int, default=30, help="sessions per site")
    demo.add_argument("--rows", type=int, default=20, help="rows in each session's snapshot")
    demo.add_argument("--updates", type=int, default=60, help="row changes per session")
    demo.add_argument("--seed", type=int, default=7, help="generator seed")
    demo.add_argument("--max-offsets-per-trigger", type=int, default=1500,
                      help="records per micro-batch at most")
    demo.set_defaults(func=_demo)
    run = sub.add_parser("run", help="run the main job against given Kafka and storage")
    run.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers")
    run.add_argument("--output", required=True, help="fsspec URL of the output table")
    run.add_argument("--state", required=True, help="fsspec URL of the state location")
    run.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    run.add_argument("--topic-pattern", default="sessions-.*", help="subscribePattern regex")
    run.add_argument("--s3-endpoint",
                     help="S3 endpoint URL for s3:// URLs (default: AWS). Credentials come from "
                          "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role")
    run.add_argument("--master", default=None,
                     help="Spark master (default: spark-submit's, else local[2,4])")
    run.add_argument("--trigger", default="2 seconds",
                     help="processing-time trigger interval (default: 2 seconds)")
    run.add_argument("--available-now", action="store_true",
                     help="process what is in Kafka now, then stop (Trigger.AvailableNow)")
    run.add_argument("--max-offsets-per-trigger", type=int, default=100_000,
                     help="Kafka records per micro-batch at most, over all partitions "
                          "(default: 100000; 0: no limit)")
    run.add_argument("--idle-timeout", default="10 minutes",
                     help="expire sessions idle for this long, e.g. '30 min' (default: 10 "
                          "minutes)")
    run.add_argument("--output-format", choices=("delta", "parquet"), default="delta",
                     help="output table format: delta (a Delta Lake table, one Delta commit per "
                          "batch, read by Spark/DuckDB/Polars/Trino; default) or parquet (the "
                          "fenced Parquet table)")
    run.add_argument("--progress-every", type=float, default=10.0,
                     help="seconds between progress lines (default: 10)")
    run.set_defaults(func=_run)
    jar = sub.add_parser("shim-jar", help="print the bundled JVM shim jar's path (for "
                                          "spark-submit --jars); exit 1 if it was not built")
    jar.set_defaults(func=_shim_jar)
    register_sink_commands(sub)  # orderedstream sink {batches,files,verify,compact,vacuum}
    register_table_commands(sub)  # orderedstream table {history,compact,vacuum,verify}
    register_replay_commands(sub)  # orderedstream replay, orderedstream state
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return int(args.func(args))
    except OrderedStreamError as exc:
        parser.exit(2, f"orderedstream: {type(exc).__name__}: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
