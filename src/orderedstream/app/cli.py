"""``orderedstream``: the pack's command line (demo / main job on embedded defaults)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    from orderedstream.app.job.demo import run_demo
    from orderedstream.app.job.generator import GeneratorOptions
    from orderedstream.dev.services.embedded import embedded_services
    from orderedstream.dev.services.spark import local_spark_session

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
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": endpoints.bootstrap})
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)

        try:
            result = run_demo(spark, endpoints.bootstrap, endpoints.storage_options,
                              f"s3://{args.bucket}/{args.prefix}", endpoints.workdir, gen,
                              create_topic, max_offsets_per_trigger=args.max_offsets_per_trigger)
        finally:
            spark.stop()
    v = result.verification
    print(f"[demo] output: {result.output} (Parquet, partitioned by kind/site/date; "
          "read it with orderedstream.sinks.FencedTable, spark.read.parquet or DuckDB)")
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
    import signal

    from orderedstream.app.job.pipeline import JobMonitor, JobOptions, start_job
    from orderedstream.dev.services.s3 import s3_storage_options
    from orderedstream.dev.services.spark import local_spark_session

    storage = (s3_storage_options(args.s3_endpoint, args.access_key, args.secret_key)
               if args.s3_endpoint else {})
    opts = JobOptions(bootstrap=args.bootstrap_servers, output=args.output,
                      state_location=args.state, checkpoint=args.checkpoint,
                      topic_pattern=args.topic_pattern, storage_options=storage,
                      max_offsets_per_trigger=args.max_offsets_per_trigger, trigger=args.trigger,
                      idle_timeout=args.idle_timeout)
    if os.environ.get("PYSPARK_GATEWAY_PORT") and args.master is None:
        # Launched by spark-submit: its --master, --conf and --jars configure the session.
        from pyspark.sql import SparkSession

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
    run.add_argument("--s3-endpoint", help="S3 endpoint URL for s3:// URLs (else AWS default)")
    run.add_argument("--access-key", default="orderedstream", help="S3 access key")
    run.add_argument("--secret-key", default="orderedstream-secret", help="S3 secret key")
    run.add_argument("--master", default=None,
                     help="Spark master (default: spark-submit's, else local[2,4])")
    run.add_argument("--trigger", default="2 seconds", help="processing-time trigger interval")
    run.add_argument("--available-now", action="store_true",
                     help="process what is in Kafka now, then stop (Trigger.AvailableNow)")
    run.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    run.add_argument("--idle-timeout", default="10 minutes", help="expire idle sessions after")
    run.add_argument("--progress-every", type=float, default=10.0, help="seconds between lines")
    run.set_defaults(func=_run)
    from orderedstream.sinks.cli import register as register_sink_commands

    register_sink_commands(sub)  # orderedstream sink {batches,files,verify,compact,vacuum}
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
