"""orderedstream: the pack's command line.

  demo       the main job on embedded services (local Kafka, S3 and Spark), then verified;
             its data stays in a work folder ('orderedstream services' serves it again)
  run        the main job against given Kafka and storage, until stopped
  services   restart the demo's embedded Kafka and S3 on its work folder's data
  table      inspect and maintain the output Delta table (history, verify, compact, vacuum)
  sink       inspect and maintain a fenced Parquet table (--output-format parquet)
  replay     run a committed batch again from Kafka, or try new logic against history
  state      query the committed state: keys, one key's value, its history
  shim-jar   the bundled JVM shim's path, for spark-submit --jars

S3 credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_PROFILE, an instance role): never from the command line, where every user of the machine
can read them in the process list.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from orderedstream.app.argtypes import at_least, seconds_option
from orderedstream.app.console import environment_error, error_first
from orderedstream.app.demo_cli import register as register_demo_commands
from orderedstream.app.job.pipeline import JobOptions
from orderedstream.app.replay_cli import register as register_replay_commands
from orderedstream.app.run_cli import run_job
from orderedstream.app.table_cli import register as register_table_commands
from orderedstream.core.errors import OrderedStreamError, error_summary
from orderedstream.core.jvm import bundled_jar
from orderedstream.core.shutdown import freeze_heap_at_exit
from orderedstream.core.storage import endpoint_options
from orderedstream.sinks.cli import add_cloud_endpoints
from orderedstream.sinks.cli import register as register_sink_commands


def _remote_url(value: str) -> str:
    if not value.startswith("sc://") or len(value) <= len("sc://"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Spark Connect URL: sc://HOST:PORT (e.g. sc://localhost:15002) "
            "is accepted")
    return value


def _run(args: argparse.Namespace) -> int:
    """Run the job against given services until stopped (SIGINT/SIGTERM stop it cleanly)."""
    # s3:// URLs: the endpoint (if not AWS) from the command line, credentials from the
    # standard AWS chain; other fsspec URLs need no options.
    storage = endpoint_options(s3=args.s3_endpoint, gcs=args.gcs_endpoint,
                               azure=args.azure_endpoint)
    opts = JobOptions(bootstrap=args.bootstrap_servers, output=args.output,
                      state_location=args.state, checkpoint=args.checkpoint,
                      topic_pattern=args.topic_pattern, storage_options=storage,
                      max_offsets_per_trigger=args.max_offsets_per_trigger, trigger=args.trigger,
                      idle_timeout=args.idle_timeout, output_format=args.output_format,
                      state_snapshots=args.state_snapshots)
    # Checks (Kafka, locations), progress, restarts, errors reason first: app/run_cli.py.
    return run_job(args, opts)


def _shim_jar(_args: argparse.Namespace) -> int:
    jar = bundled_jar()
    if jar is None:
        print("orderedstream: this installation has no shim jar (build it from a checkout "
              "with 'python -m orderedstream.dev.shim build')", file=sys.stderr)
        return 1
    print(jar)
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage errors print the reason first, the usage after it."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}\n\n{self.format_usage()}")


def main(argv: list[str] | None = None) -> int:
    """The ``orderedstream`` command: parse ``argv`` and run the chosen subcommand.

    The pack's own errors, and setup errors found behind Spark's (no credentials, an
    endpoint or brokers not answering), are printed reason first instead of raised.

    Parameters
    ----------
    argv
        The arguments; None: ``sys.argv[1:]``, and the program's own quick exit (the heap
        frozen at exit, ``orderedstream.core.shutdown``).

    Returns
    -------
    int
        The exit status: the subcommand's; 2 for the pack's errors and setup errors, 1 for
        another failure with a summary.

    Raises
    ------
    SystemExit
        Bad arguments (argparse's usage message).
    Exception
        A failure without a summary, as raised."""
    if argv is None:  # the program itself (not a caller's own process): a quick exit
        freeze_heap_at_exit()
    parser = _Parser(prog="orderedstream", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    register_demo_commands(sub)  # orderedstream demo, orderedstream services
    run = sub.add_parser(
        "run", help="run the main job against given Kafka and storage until stopped",
        description="Run the main job: orderedkafka -> ordered per-session state -> output "
                    "table. Kafka and every location are checked before Spark starts; "
                    "SIGINT/SIGTERM stop it after the running batch.")
    run.add_argument("--bootstrap-servers", required=True,
                     help="Kafka bootstrap servers, host:port[,host:port...] (required)")
    run.add_argument("--output", required=True,
                     help="output table: local path or fsspec URL, e.g. s3://bucket/tables/x "
                          "(required)")
    run.add_argument("--state", required=True,
                     help="state location: local path or fsspec URL (required)")
    run.add_argument("--checkpoint", required=True,
                     help="Spark checkpoint directory: local path or a URL Spark can write "
                          "(required)")
    run.add_argument("--topic-pattern", default="sessions-.*",
                     help="regex of the topics to read (subscribePattern; default: "
                          "'sessions-.*')")
    run.add_argument("--s3-endpoint",
                     help="S3 endpoint URL for s3:// URLs (default: AWS). Credentials come from "
                          "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role")
    add_cloud_endpoints(run)
    where = run.add_mutually_exclusive_group()
    where.add_argument("--master", default=None,
                       help="Spark master URL: a plain Spark session with your configuration "
                            "(default: spark-submit's, else the embedded session on local[2,4], "
                            "tuned for this machine)")
    where.add_argument("--remote", default=None, type=_remote_url,
                       help="Spark Connect server, sc://HOST:PORT: the job runs through Spark "
                            "Connect (the pack installed where the server runs; not with "
                            "--master)")
    run.add_argument("--trigger", default="2 seconds",
                     help="processing-time trigger interval, a duration such as '2 seconds' or "
                          "'500ms' (default: 2 seconds)")
    run.add_argument("--available-now", action="store_true",
                     help="process what is in Kafka now, then stop (Trigger.AvailableNow; "
                          "default: run until stopped)")
    run.add_argument("--max-offsets-per-trigger", type=_limit, default=100_000,
                     help="Kafka records per micro-batch at most, over all partitions "
                          "(records, > 0; default: 100000; 'none': no limit)")
    run.add_argument("--idle-timeout", default="10 minutes",
                     help="expire sessions idle for this long, a duration such as '30 min' "
                          "(default: 10 minutes)")
    run.add_argument("--output-format", choices=("delta", "parquet"), default="delta",
                     help="output table format: delta (a Delta Lake table, one Delta commit per "
                          "batch, read by delta-rs, DuckDB, Polars, Trino, and Spark through "
                          "delta-rs until delta-spark supports Spark 4.3; default) or parquet "
                          "(the fenced Parquet table)")
    run.add_argument("--state-snapshots", choices=("changelog", "checkpoint"),
                     default="changelog",
                     help="how each batch saves a partition's state: changelog (the batch's "
                          "writes as one log, a full RocksDB checkpoint every 10th batch; "
                          "default) or checkpoint (a RocksDB checkpoint every batch)")
    run.add_argument("--progress-every", type=seconds_option, default=10.0,
                     help="seconds between progress lines when the output is not a terminal "
                          "(seconds; default: 10)")
    run.add_argument("--metrics-file", type=Path, default=None,
                     help="write the job's figures in Prometheus text format to this file, "
                          "replaced atomically after every batch (default: none)")
    run.add_argument("--max-restarts", type=at_least(0, "restarts"), default=3,
                     help="restart the query from its checkpoint after this many transient "
                          "failures at most; the pack's own errors never restart (default: 3)")
    run.add_argument("--log-file", type=Path, default=None,
                     help="where Spark, py4j and Kafka client logs go (default: "
                          "./orderedstream-logs/orderedstream-<pid>.log)")
    run.add_argument("--verbose", action="store_true",
                     help="show Spark, py4j and Kafka client logs on the console (default: "
                          "in the log file)")
    run.set_defaults(func=_run)
    jar = sub.add_parser("shim-jar", help="print the bundled JVM shim jar's path (for "
                                          "spark-submit --jars); exit 1 if it was not built")
    jar.set_defaults(func=_shim_jar)
    register_sink_commands(sub)  # orderedstream sink {batches,files,verify,compact,vacuum}
    register_table_commands(sub)  # orderedstream table {history,compact,vacuum,verify}
    register_replay_commands(sub)  # orderedstream replay, orderedstream state
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the (sub)command's own usage, not the top-level one
        _chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.func(args))
    except OrderedStreamError as exc:
        sys.stdout.flush()
        sys.stderr.write(error_first(exc))
        return 2
    except Exception as exc:  # noqa: BLE001 - Spark's wrappers: the pack's reason first
        setup = environment_error(exc)  # no credentials, an endpoint or brokers not answering
        if setup is not None:
            sys.stdout.flush()
            sys.stderr.write(error_first(setup))
            return 2
        if error_summary(exc) is None:
            raise
        sys.stdout.flush()
        sys.stderr.write(error_first(exc))
        return 1


def _chosen_parser(parser: argparse.ArgumentParser,
                   args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost (sub)command's parser that ``args`` were parsed with (``sink files``)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs else None
        if name is None or name not in subs[0].choices:
            return parser
        parser = subs[0].choices[name]


def _limit(text: str) -> int | None:
    """``--max-offsets-per-trigger``: a positive number of records, or 'none'."""
    if text.strip().lower() in ("none", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of records") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be > 0 records (got {value}); use 'none' for no limit")
    return value

if __name__ == "__main__":
    sys.exit(main())
