"""``orderedstream table history|compact|vacuum|verify URL``: a Delta output table's upkeep.

Safe beside the running stream: ``compact`` (delta-rs ``optimize.compact``) commits with
``dataChange=false`` and changes no row; a conflict with a streaming commit is retried, and
each attempt either commits whole or not at all, so no row is lost or duplicated. ``vacuum``
deletes only files that no version within the retention references and files no commit ever
added (crashed attempts), older than the retention. A Delta log checkpoint is written after a
compaction (the stream writes one every ``delta.checkpointInterval`` versions on its own).
Credentials come from the AWS chain (environment, profile, role), never from the command line.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from orderedstream.app.argtypes import at_least
from orderedstream.core.errors import CommitConflictError, OptionError, TableIntegrityError
from orderedstream.core.location import open_location
from orderedstream.core.storage import url_to_fs
from orderedstream.sinks.cli import add_cloud_endpoints, storage_options_from_args
from orderedstream.sinks.deltafiles import delta_storage_options, log_path
from orderedstream.sinks.deltalog import DELTA_LOG, DeltaBatchLog, table_format
from orderedstream.sinks.options import parse_size

MIN_RETENTION_HOURS = 1


def _open(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    from deltalake import DeltaTable

    storage = storage_options_from_args(args)
    open_location(args.url, "table", storage)  # a bad URL, a dead endpoint, no bucket: named
    if table_format(args.url, storage) != "delta":
        raise OptionError(f"{args.url} is not a Delta table (no {DELTA_LOG}/ there); a fenced "
                          "Parquet table is maintained with 'orderedstream sink ...'")
    return DeltaTable(args.url, storage_options=delta_storage_options(args.url, storage)), storage


def _history(args: argparse.Namespace) -> int:
    table, storage = _open(args)
    log = DeltaBatchLog(args.url, storage)
    latest = table.version()
    print(f"{'version':>8} {'batch':>7} {'files+':>7} {'files-':>7} {'rows+':>10}  "
          f"{'operation':<12} writer  offsets")
    for entry in log.entries(max(0, latest - args.limit + 1), latest):
        r = entry.record
        batch = "-" if r.batch_id is None else str(r.batch_id)
        ranges = ", ".join(f"{k}:[{v[0]},{v[1]})" for k, v in sorted(entry.offsets.items()))
        print(f"{r.version:>8} {batch:>7} {len(r.files):>7} {len(r.removes):>7} {r.rows:>10}  "
              f"{entry.operation:<12} {r.writer_id}  {ranges}")
    return 0


def _compact(args: argparse.Namespace) -> int:
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties

    table, _ = _open(args)
    target = parse_size("--target-size", args.target_size)
    for attempt in range(1, args.retries + 1):
        try:
            table.update_incremental()
            metrics = table.optimize.compact(
                target_size=target, commit_properties=CommitProperties(max_commit_retries=5))
            break
        except CommitFailedError as exc:  # a streaming commit removed or replaced a file
            if attempt == args.retries:
                raise CommitConflictError(f"compaction of {args.url} conflicted with concurrent "
                                          f"commits {args.retries} times; try again ({exc})"
                                          ) from None
            time.sleep(min(5.0, 0.2 * attempt))
    table.update_incremental()
    table.create_checkpoint()
    print(json.dumps({"version": table.version(), "files_added": metrics.get("numFilesAdded"),
                      "files_removed": metrics.get("numFilesRemoved"),
                      "batches": metrics.get("numBatches"),  # delta-rs: Arrow record batches
                      "record_batches": metrics.get("numBatches")}, sort_keys=True))
    return 0


def _vacuum(args: argparse.Namespace) -> int:
    if args.retention_hours < MIN_RETENTION_HOURS:
        raise OptionError(f"--retention-hours {args.retention_hours} is too short: at least "
                          f"{MIN_RETENTION_HOURS:g} hour, longer than any batch takes (a "
                          "running batch's files are not in the log yet)")
    table, _ = _open(args)
    deleted = table.vacuum(retention_hours=args.retention_hours, dry_run=args.dry_run,
                           enforce_retention_duration=False, full=True)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {len(deleted)} files (retention {args.retention_hours:g} hours)")
    for path in deleted[: args.show]:
        print(f"  {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    import pyarrow as pa

    table, storage = _open(args)
    fs, root = url_to_fs(args.url.rstrip("/"), storage)
    root = root.rstrip("/")
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = [log_path(p) for p in actions["path"].to_pylist()]
    sizes = actions["size_bytes"].to_pylist()
    rows = sum(int(n or 0) for n in actions["num_records"].to_pylist())
    found = {p[len(root) + 1:]: int(info["size"]) for p, info in
             fs.find(root, detail=True).items() if f"/{DELTA_LOG}/" not in p + "/"}
    problems = [f"{p}: missing" for p in paths if p not in found]
    problems += [f"{p}: {found[p]} bytes, the log says {s}" for p, s in zip(paths, sizes,
                                                                            strict=True)
                 if p in found and found[p] != int(s)]
    batches: dict[str, list[int]] = {}
    for entry in DeltaBatchLog(args.url, storage).entries(0, table.version()):  # the same
        # version as the files above, though a stream commits meanwhile
        if entry.record.batch_id is not None:
            batches.setdefault(entry.record.writer_id, []).append(entry.record.batch_id)
    for writer, ids in batches.items():
        twice = sorted({b for b in ids if ids.count(b) > 1})
        if twice:
            problems.append(f"writer {writer!r}: batches {twice} committed more than once")
        if ids != sorted(ids):
            problems.append(f"writer {writer!r}: batch ids do not grow with the versions")
    unreferenced = len([p for p in found if p.endswith(".parquet") and p not in set(paths)])
    print(json.dumps({"version": table.version(), "live_files": len(paths), "rows": rows,
                      "writers": {w: {"batches": len(ids), "latest": max(ids)}
                                  for w, ids in batches.items()},
                      "unreferenced_files": unreferenced, "problems": problems}, sort_keys=True))
    if problems:
        raise TableIntegrityError(f"{args.url}: {len(problems)} problem(s): "
                                  + "; ".join(problems[:5]))
    return 0


def register(sub: Any) -> None:
    """Add ``table {history,compact,vacuum,verify}`` to an argparse subparsers object.

    Parameters
    ----------
    sub
        The ``orderedstream`` parser's subparsers object (``add_subparsers()``)."""
    table = sub.add_parser("table", help="inspect and maintain a Delta output table")
    cmds = table.add_subparsers(dest="table_command", required=True,
                                metavar="{history,compact,vacuum,verify}")

    def add(name: str, func: Any, text: str) -> argparse.ArgumentParser:
        cmd = cmds.add_parser(name, help=text, description=text)
        cmd.add_argument("url", help="table root URL (s3://bucket/table or a local path)")
        cmd.add_argument("--s3-endpoint", default=None,
                         help="S3 endpoint URL for s3:// URLs (default: AWS itself); "
                              "credentials come from the AWS environment chain")
        add_cloud_endpoints(cmd)
        cmd.add_argument("--storage-options", default=None,
                         help="extra fsspec options as a JSON object, no secrets "
                              "(default: none)")
        cmd.set_defaults(func=func)
        return cmd

    history = add("history", _history, "list the latest versions: batch, files, rows, "
                                       "operation, writer, Kafka offsets")
    history.add_argument("--limit", type=at_least(1, "versions"), default=50,
                         help="number of latest versions to list (default: 50)")
    compact = add("compact", _compact, "rewrite small files into larger ones (no data change), "
                                       "retrying conflicts with streaming commits")
    compact.add_argument("--target-size", "--target-file-size", dest="target_size",
                         default="128MB",
                         help="target file size in bytes, or with a unit such as 256MB "
                              "(default: 128MB; --target-file-size, as 'sink compact' names "
                              "it, is the same)")
    compact.add_argument("--retries", type=at_least(1, "attempts"), default=10,
                         help="attempts when a streaming commit conflicts (default: 10)")
    vacuum = add("vacuum", _vacuum, "delete files no retained version references and files of "
                                    "crashed attempts, older than the retention")
    vacuum.add_argument("--retention-hours", type=int, default=168,
                        help="keep files younger than this many hours (default: 168 = 7 days; "
                             f"at least {MIN_RETENTION_HOURS:g})")
    vacuum.add_argument("--dry-run", action="store_true",
                        help="list what would be deleted, delete nothing (default: delete)")
    vacuum.add_argument("--show", type=at_least(0, "paths"), default=20,
                        help="number of deleted paths to print (default: 20)")
    add("verify", _verify, "check every live file exists with its logged size and no batch of "
                           "any writer was committed twice; exit 2 on a problem")


__all__ = ["register"]
