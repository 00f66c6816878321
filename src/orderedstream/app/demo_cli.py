"""``orderedstream demo`` and ``orderedstream services``: the first run, and its data later.

The demo keeps everything in one work folder (``orderedstream.app.demo_workdir``): the
embedded Kafka's and S3's data, the output table on local disk, the Spark checkpoint and the
logs. ``orderedstream services --workdir DIR`` restarts the embedded Kafka and S3 on that
folder's data (same ports when free) so the state can be read and topics replayed later.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from orderedstream.app.argtypes import at_least, seconds_option
from orderedstream.app.console import setup_console
from orderedstream.app.demo_workdir import prepare
from orderedstream.core.shutdown import stop_session


def register(sub: Any) -> None:
    """Add ``demo`` and ``services`` to the CLI's subparsers.

    Parameters
    ----------
    sub
        The CLI's subparsers (what ``ArgumentParser.add_subparsers`` returns)."""
    demo = sub.add_parser(
        "demo", help="run the pipeline on embedded (or given) services and verify it",
        description="Generate capture sessions into a local Kafka, run the main job on local "
                    "Spark (state on a local S3, output table on local disk), verify the "
                    "output against the topics, and print queries that work afterwards.")
    demo.add_argument("--workdir", type=Path, default=Path("orderedstream-demo"),
                      help="folder for the services' data, the output table, the checkpoint "
                           "and logs (default: ./orderedstream-demo). A folder of a previous "
                           "run is continued")
    demo.add_argument("--clean", action="store_true",
                      help="delete the work folder first and start over (default: continue)")
    demo.add_argument("--bootstrap-servers",
                      help="external Kafka bootstrap servers (default: start a local broker)")
    demo.add_argument("--s3-endpoint",
                      help="external S3 endpoint URL for the state (default: start SeaweedFS)")
    demo.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    demo.add_argument("--bucket", default="lake",
                      help="S3 bucket for the state (default: lake)")
    demo.add_argument("--prefix", default="sessions",
                      help="topic prefix: topics are <prefix>-<site> (default: sessions)")
    demo.add_argument("--sites", type=at_least(1, "sites"), default=3,
                      help="sites (topics) at the start, at least 1; one more appears mid-run "
                           "(default: 3)")
    demo.add_argument("--partitions", type=at_least(1, "partitions"), default=3,
                      help="partitions per topic, at least 1 (default: 3)")
    demo.add_argument("--sessions", type=at_least(1, "sessions"), default=30,
                      help="sessions per site, at least 1 (default: 30)")
    demo.add_argument("--rows", type=at_least(0, "rows"), default=20,
                      help="rows in each session's first snapshot, 0 or more (default: 20)")
    demo.add_argument("--updates", type=at_least(0, "row changes"), default=60,
                      help="row changes per session, 0 or more (default: 60)")
    demo.add_argument("--seed", type=int, default=7, help="generator seed (default: 7)")
    demo.add_argument("--max-offsets-per-trigger", type=at_least(1, "records"), default=1500,
                      help="Kafka records per micro-batch at most, over all partitions "
                           "(records; default: 1500; must be > 0)")
    demo.add_argument("--progress-every", type=seconds_option, default=10.0,
                      help="seconds between progress lines when the output is not a terminal "
                           "(seconds, > 0; default: 10)")
    demo.add_argument("--verbose", action="store_true",
                      help="show Spark, py4j and Kafka client logs here instead of the log "
                           "file")
    demo.set_defaults(func=run_demo_command)
    services = sub.add_parser(
        "services", help="(re)start the demo's embedded Kafka and S3 on a work folder's data",
        description="Start the embedded Kafka broker and S3 server on the data a demo left "
                    "in --workdir (the same ports when they are free), or empty ones with "
                    "--new, print their endpoints and run until Ctrl-C.")
    services.add_argument("--workdir", type=Path, default=Path("orderedstream-demo"),
                          help="the demo's work folder (default: ./orderedstream-demo)")
    services.add_argument("--bucket", default="lake",
                          help="S3 bucket to serve (default: lake)")
    services.add_argument("--new", action="store_true",
                          help="start empty services when --workdir holds no demo data (for "
                               "your own experiments; their data is kept there too). Default: "
                               "refuse such a folder, which is most often a mistyped one")
    services.set_defaults(func=run_services_command)


def run_demo_command(args: argparse.Namespace) -> int:
    """``orderedstream demo``: generate sessions into Kafka, run the main job on them, verify
    the output against the topics and print the tables and queries to run afterwards.

    Parameters
    ----------
    args
        The parsed ``demo`` arguments (see :func:`register`).

    Returns
    -------
    int
        The exit code: 0 when the output is verified, 1 otherwise.

    Raises
    ------
    OptionError
        The work folder can neither continue nor start clean (see
        :func:`orderedstream.app.demo_workdir.prepare`)."""
    from orderedstream.app.job.demo import run_demo
    from orderedstream.app.job.figures import FigureTracker
    from orderedstream.app.job.generator import GeneratorOptions
    from orderedstream.app.job.monitor import ProgressView
    from orderedstream.app.run_cli import create_topic_fn, start_spark
    from orderedstream.dev.services.embedded import embedded_services

    began = time.monotonic()
    work = prepare(args.workdir, clean=args.clean)
    console = setup_console(verbose=args.verbose, log_path=work.log_path, announce=False)
    how = (f"continuing run {work.wave} in {work.root} (its checkpoint and services data are "
           "there; --clean starts over)" if work.continues
           else f"starting clean in {work.root}")
    print(f"[demo] {how}", flush=True)
    if console.log_path:
        print(f"[demo] Spark, py4j and Kafka client logs: {console.log_path}", flush=True)
    state_url = f"s3://{args.bucket}/{args.prefix}/state"
    with ProgressView("orderedstream demo", prefix="[demo]", every=args.progress_every) as view:
        view.phase("starting Kafka and S3 (SeaweedFS)")
        with embedded_services(args.bootstrap_servers, args.s3_endpoint, work.root,
                               bucket=args.bucket, keep_ports=True) as endpoints:
            for line in endpoints.started:
                view.print(f"[demo] started {line}")
            (work.root / "demo.json").write_text(json.dumps(
                {"state": state_url, "output": str(work.output), "prefix": args.prefix,
                 "bucket": args.bucket}, indent=1) + "\n")
            view.phase(f"starting Spark session ({args.master})")
            spark = start_spark("orderedstream-demo", args.master, console,
                                tmp_dir=work.root / "spark", embedded=True)
            view.print(f"[demo] Spark {spark.version} on {args.master}")
            gen = GeneratorOptions(
                prefix=args.prefix, sites=args.sites, late_sites=1, partitions=args.partitions,
                sessions_per_site=args.sessions, rows=args.rows, updates=args.updates,
                seed=args.seed + work.wave, session_tag=f"w{work.wave}" if work.wave else "")
            try:
                result = run_demo(spark, endpoints.bootstrap, endpoints.storage_options,
                                  f"s3://{args.bucket}/{args.prefix}", work.root, gen,
                                  create_topic_fn(endpoints.bootstrap),
                                  max_offsets_per_trigger=args.max_offsets_per_trigger,
                                  output=str(work.output), view=view, tracker=FigureTracker())
            finally:
                stop_session(spark)
    return _summary(args, work, result, endpoints.storage_options, state_url, began)


def _summary(args: argparse.Namespace, work: Any, result: Any, storage: dict[str, Any],
             state_url: str, began: float) -> int:
    from orderedstream.app.demo_report import commands, print_tables, read_output

    v = result.verification
    out = lambda line: print(line, flush=True)  # noqa: E731
    out(f"[demo] {result.batches} batches; {v.checked} changes checked against the topics: "
        f"lost {v.lost}, duplicated {v.duplicated}, out of order {v.out_of_order}; dead letters "
        f"{v.expected_dead_letters - v.dead_letters_missing}/{v.expected_dead_letters}; wrong "
        f"final tables {v.wrong_final_tables}")
    for example in v.examples:
        out(f"[demo]   {example}")
    print_tables(read_output(work.output), out)
    out("[demo] query the output after the demo (copy-paste):")
    for line in commands(work.root, state_url, storage):
        out(f"  {line}")
    verdict = "VERIFIED" if v.ok else "FAILED"
    work.record_run(verdict=verdict, batches=result.batches, checked=v.checked)
    out(f"[demo] {verdict} in {time.monotonic() - began:.0f}s "
        f"({'continued' if work.continues else 'clean start'}; data kept in {work.root})")
    return 0 if v.ok else 1


def run_services_command(args: argparse.Namespace) -> int:
    """``orderedstream services``: serve the embedded Kafka and S3 on a work folder's data,
    print their endpoints and run until SIGINT or SIGTERM.

    Parameters
    ----------
    args
        The parsed ``services`` arguments (see :func:`register`).

    Returns
    -------
    int
        The exit code, 0 once stopped.

    Raises
    ------
    OptionError
        ``--workdir`` holds no demo data and ``--new`` is not given, or it is a file."""
    from orderedstream.core.errors import OptionError
    from orderedstream.dev.services.embedded import embedded_services

    root = Path(args.workdir).absolute()
    if not (root / "kafka").is_dir() and not (root / "s3").is_dir():
        if not args.new:
            raise OptionError(f"--workdir {root} holds no embedded services' data (no kafka/ "
                              "or s3/ folder); run the demo first (scripts/demo or "
                              f"orderedstream demo --workdir {root}), or add --new to start "
                              "empty services there")
        if root.exists() and not root.is_dir():
            raise OptionError(f"--workdir {root} is a file, not a folder")
        root.mkdir(parents=True, exist_ok=True)
        print(f"[services] no demo data in {root}: starting empty services (--new)", flush=True)
    setup_console(verbose=False, log_path=root / "logs" / "services.log", announce=False)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with embedded_services(workdir=root, bucket=args.bucket, keep_ports=True) as endpoints:
        for line in endpoints.started:
            print(f"[services] started {line}", flush=True)
        opts = endpoints.storage_options
        print(f"[services] Kafka bootstrap servers: {endpoints.bootstrap}", flush=True)
        print(f"[services] S3 endpoint: {endpoints.s3_endpoint}  (access key "
              f"{opts.get('key')}, secret {opts.get('secret')}, region us-east-1)", flush=True)
        print(f"[services] for other tools: export AWS_ENDPOINT_URL={endpoints.s3_endpoint} "
              f"AWS_ACCESS_KEY_ID={opts.get('key')} AWS_SECRET_ACCESS_KEY={opts.get('secret')} "
              "AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true", flush=True)
        print("[services] ready; Ctrl-C stops them (their data stays in "
              f"{root})", flush=True)
        while not stop.wait(1.0):
            pass
        print("[services] stopping", flush=True)
    return 0
