"""``orderedstream replay`` and ``orderedstream state``: step through committed batches, try
new logic against history, query committed state.

- ``replay``: re-run one batch (``--batch N``) or a range (``--from N --to M``) of one Kafka
  partition in this process, from the state version the batch started from (a private copy),
  with the records it read (from Kafka again) and its recorded processing time; compare rows
  and end state with what was committed. Prints ``identical`` or the differences (a line with
  ``differ``). ``--function MODULE:ATTR`` runs another function (the current directory is on
  the import path). Exit 0 when the replay ran, 2 when it could not (e.g. retention removed
  the offsets). The replayed rows stay in ``--scratch`` (default: a new temp folder, kept
  after a replay that wrote rows, removed after a failed one).
- ``state keys|get|history``: key count, one key's value at a committed batch, its history.

S3 credentials come from the standard AWS chain (``AWS_ACCESS_KEY_ID``, ...), never argv.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from orderedstream.core.errors import OptionError
from orderedstream.core.storage import endpoint_options
from orderedstream.sinks.cli import add_cloud_endpoints

SHOW_DEFAULT = 10
KEY_TYPES = ("bytes", "str", "int")


def _url(value: str) -> str:
    """A plain local path becomes absolute (the stage wants a URL or an absolute path)."""
    return value if "://" in value else os.path.abspath(value)


def _storage(args: argparse.Namespace) -> dict[str, Any]:
    return endpoint_options(s3=args.s3_endpoint, gcs=args.gcs_endpoint,
                            azure=args.azure_endpoint)


def _topic_partition(text: str) -> tuple[str, int]:
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise OptionError(f"--partition {text!r}: TOPIC:PARTITION is required, e.g. "
                          "sessions-a:0")
    return topic, int(number)


def _batches(args: argparse.Namespace) -> tuple[int, int]:
    if args.batch is not None:
        if args.first is not None or args.last is not None:
            raise OptionError("give either --batch N or --from N [--to M], not both")
        return args.batch, args.batch
    if args.first is None:
        raise OptionError("which batch? --batch N, or --from N [--to M] for a range")
    last = args.first if args.last is None else args.last
    if last < args.first:
        raise OptionError(f"--from {args.first} --to {last}: --to must be >= --from")
    return args.first, last


def _replay(args: argparse.Namespace) -> int:
    from orderedstream.statestore.ordered.replay import replay

    topic, partition = _topic_partition(args.partition)
    first, last = _batches(args)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # --function modules next to the user, like python -m
    keys = [c.strip() for c in args.key_columns.split(",") if c.strip()] if args.key_columns \
        else None
    result = replay(output=_url(args.output), state=_url(args.state),
                    checkpoint=args.checkpoint, topic=topic, partition=partition, first=first,
                    last=last, bootstrap_servers=args.bootstrap_servers,
                    function=args.function, storage_options=_storage(args),
                    scratch=args.scratch, key_columns=keys)
    out = print
    out(f"replay of Kafka {topic}:{partition}, batch{'es' if last > first else ''} "
        f"{first}{f'..{last}' if last > first else ''}, function {result.function}")
    for b in result.batches:
        what = (f"{b.records} records, {b.timeouts} timeouts" if b.ran
                else "nothing to do (no records, no due timeout)")
        verdict = "identical" if b.output.identical else (
            f"rows differ: {b.output.added} added, {b.output.removed} removed, "
            f"{b.output.changed} changed")
        out(f"batch {b.batch_id}: offsets [{b.range.start}, {b.range.end}) {what} "
            f"(committed {b.committed_records} records); rows replayed {b.replayed_rows}, "
            f"committed {b.committed_rows}: {verdict}")
    total = result.output
    if not total.identical:
        out(f"output rows differ: {total.added} added, {total.removed} removed, "
            f"{total.changed} changed, {total.same} identical; in {total.keys_differing} keys")
        for key, (added, removed, changed) in list(total.per_key.items())[:args.show]:
            out(f"  key {key}: {added} added, {removed} removed, {changed} changed")
        if total.keys_differing > args.show:
            out(f"  ... and {total.keys_differing - args.show} more keys")
        out("first differences (key, offset, column: committed vs replayed):")
        for diff in total.first[:args.show]:
            out(f"  {diff.describe()}")
    state = result.state
    if state.identical:
        out(f"state: {state.committed_keys} keys, identical to committed version "
            f"{result.state_version}")
    else:
        out(f"state differs from committed version {result.state_version}: {state.changed} "
            f"keys changed, {state.only_committed} missing in the replay, "
            f"{state.only_replayed} only in the replay (committed {state.committed_keys} keys, "
            f"replayed {state.replayed_keys})")
        for diff in state.first[:args.show]:
            out(f"  {diff.describe()}")
    if not any(b.scratch_file for b in result.batches):
        out("replayed output: none (no batch had records or a due timeout)")
    elif args.scratch is None:
        out(f"replayed output: {os.path.join(result.scratch, 'output')} (a temp folder, kept: "
            f"delete {result.scratch} when done)")
    else:
        out(f"replayed output: {os.path.join(result.scratch, 'output')}")
    out("identical" if result.identical else "replay and committed batch differ")
    return 0


def _key(args: argparse.Namespace) -> Any:
    if args.key_type == "bytes":
        return args.key.encode()
    if args.key_type == "int":
        try:
            return int(args.key)
        except ValueError:
            raise OptionError(f"--key {args.key!r} with --key-type int: an integer") from None
    return args.key


def _state(args: argparse.Namespace) -> int:
    from orderedstream.statestore.ordered.state_inspect import StateInspector
    from orderedstream.statestore.ordered.state_source import json_text

    inspector = StateInspector(output=_url(args.output), state=_url(args.state),
                               storage_options=_storage(args))
    if args.action == "keys":
        wanted = [_topic_partition(args.partition)] if args.partition else None
        bases = inspector.partitions(args.batch)
        targets = wanted or [(pid.rpartition("/")[0], int(pid.rpartition("/")[2]))
                             for pid in sorted(bases)]
        total = 0
        for topic, number in targets:
            count = inspector.key_count(topic, number, args.batch)
            total += count
            print(f"{topic}:{number}\t{count} keys")
        print(f"total\t{total} keys")
        return 0
    if not args.partition or args.key is None:
        raise OptionError(f"state {args.action} needs --partition TOPIC:P and --key KEY")
    topic, number = _topic_partition(args.partition)
    key = _key(args)
    if args.action == "get":
        found = [inspector.value(topic, number, key, args.batch)]
    else:
        found = list(inspector.history(topic, number, key, first=args.first, last=args.last))
    for kv in found:
        shown = json_text(kv.value) if kv.exists else "(no state)"
        print(f"batch {kv.batch_id}\tversion {kv.version}\ttimeout_ms {kv.timeout_ms}\t{shown}")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, metavar="URL",
                        help="URL (or local path) of the job's output table, whose commit "
                             "records name each batch's offsets and state versions")
    parser.add_argument("--state", required=True, metavar="URL",
                        help="URL (or local path) of the state location")
    parser.add_argument("--s3-endpoint", metavar="URL",
                        help="S3 endpoint URL for s3:// URLs (default: AWS); credentials from "
                             "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a role")
    add_cloud_endpoints(parser)


def register(sub: Any) -> None:
    """Add ``replay`` and ``state`` to the ``orderedstream`` command's subparsers.

    Parameters
    ----------
    sub
        The ``orderedstream`` parser's subparsers object (``add_subparsers()``)."""
    rp = sub.add_parser("replay", help="re-run committed batches of one Kafka partition in "
                                       "this process and compare with what they committed")
    rp.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,...]",
                    help="Kafka bootstrap servers")
    _common(rp)
    rp.add_argument("--checkpoint", required=True, metavar="DIR",
                    help="the query's Spark checkpoint directory (offsets/N: each batch's "
                         "planned Kafka offsets)")
    rp.add_argument("--batch", type=int, metavar="N", help="batch id to replay")
    rp.add_argument("--from", dest="first", type=int, metavar="N",
                    help="first batch id of a range (state flows batch to batch)")
    rp.add_argument("--to", dest="last", type=int, metavar="M",
                    help="last batch id of a range, inclusive (default: --from)")
    rp.add_argument("--partition", required=True, metavar="TOPIC:P",
                    help="Kafka topic and partition to replay, e.g. sessions-site00:0")
    rp.add_argument("--function", metavar="MODULE:ATTR",
                    help="another user function (a class is built with no arguments); "
                         "default: the function the batch recorded, with its parameters")
    rp.add_argument("--scratch", metavar="DIR",
                    help="folder for the replayed output (DIR/output, Parquet per batch) and "
                         "the private state copy; a folder you give is never deleted "
                         "(default: a new folder "
                         f"{os.path.join(tempfile.gettempdir(), 'orderedstream-replay-*')}, in "
                         "$TMPDIR if set, kept after a replay that wrote rows, its path printed "
                         "at the end; deleted when the replay fails or is refused)")
    rp.add_argument("--key-columns", metavar="COL[,COL...]",
                    help="output columns that group the diff (default: the function's "
                         "output_key_columns, e.g. session, else the state key column)")
    rp.add_argument("--show", type=int, default=SHOW_DEFAULT, metavar="COUNT",
                    help=f"differences and keys listed at most (default: {SHOW_DEFAULT})")
    rp.set_defaults(func=_replay)
    st = sub.add_parser("state", help="query committed state: key count, a key's value at a "
                                      "batch, a key's history across batches")
    st.add_argument("action", choices=("keys", "get", "history"),
                    help="keys: key count per partition; get: one key's value; history: one "
                         "key across the state versions of a batch range")
    _common(st)
    st.add_argument("--partition", metavar="TOPIC:P",
                    help="Kafka topic and partition (keys: default all partitions)")
    st.add_argument("--key", metavar="KEY",
                    help="the state key (the Kafka message key for the main job)")
    st.add_argument("--key-type", choices=KEY_TYPES, default="bytes",
                    help="how --key is typed: bytes (UTF-8 of the text; Kafka keys), str or "
                         "int (default: bytes)")
    st.add_argument("--batch", type=int, metavar="N",
                    help="as committed by this batch id (keys/get; default: the latest "
                         "committed batch)")
    st.add_argument("--from", dest="first", type=int, metavar="N",
                    help="history: first batch id (default: 20 batches before --to)")
    st.add_argument("--to", dest="last", type=int, metavar="M",
                    help="history: last batch id, inclusive (default: the latest)")
    st.set_defaults(func=_state)


__all__ = ["register"]
