"""``python -m orderedstream.sinks``: inspect and maintain a fenced Parquet table.

Commands: ``batches`` (versions, batch ids, files, rows), ``files`` (live files), ``verify``
(every live file exists with its recorded size), ``compact``, ``vacuum``.
``register(subparsers)`` adds the same commands (under ``sink``) to another CLI.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from orderedstream.core.errors import (
    OptionError,
    OrderedStreamError,
    StateNotFoundError,
    UnsupportedFormatError,
)
from orderedstream.core.location import open_location
from orderedstream.core.storage import endpoint_options
from orderedstream.sinks.options import parse_size

#: fsspec option names that carry secrets: refused on the command line (the process list shows
#: it to every user of the machine); the AWS chain or the filesystem's own config supplies them.
SECRET_OPTIONS = ("key", "secret", "token", "password", "session_token", "access_key",
                  "secret_key", "account_key", "sas_token", "client_secret")


def storage_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """fsspec options from ``--storage-options`` (JSON, secrets refused) and ``--s3-endpoint``
    (credentials from the AWS chain); shared by the ``sink`` and ``table`` commands.

    Parameters
    ----------
    args
        Parsed arguments with ``storage_options`` and ``s3_endpoint``, and optionally
        ``gcs_endpoint`` / ``azure_endpoint``.

    Returns
    -------
    dict
        The endpoints' options, overridden by the ``--storage-options`` keys.

    Raises
    ------
    OptionError
        ``--storage-options`` is not a JSON object, or names a secret (``SECRET_OPTIONS``).

    Runs on
    -------
    driver (the command's process)"""
    options: dict[str, Any] = {}
    if args.storage_options:
        try:
            options = json.loads(args.storage_options)
        except json.JSONDecodeError as exc:
            raise OptionError(f"--storage-options is not JSON ({exc}): pass an object such as "
                              "'{\"anon\": true}'") from None
        if not isinstance(options, dict):
            raise OptionError("--storage-options must be a JSON object of fsspec options")
        secret = sorted(k for k in options if k.lower() in SECRET_OPTIONS)
        if secret:
            raise OptionError(f"--storage-options must not carry secrets ({', '.join(secret)}): "
                              "use AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or a "
                              "role for S3, or the filesystem's own configuration")
    # Credentials come from each cloud's standard environment, never argv.
    return {**endpoint_options(s3=args.s3_endpoint, gcs=getattr(args, "gcs_endpoint", None),
                               azure=getattr(args, "azure_endpoint", None)), **options}


def add_cloud_endpoints(parser: argparse.ArgumentParser) -> None:
    """``--gcs-endpoint`` / ``--azure-endpoint``: emulators and private endpoints of Google
    Cloud Storage and Azure Blob Storage, beside ``--s3-endpoint`` (docs/storage.md).

    Parameters
    ----------
    parser
        The command's parser; the two options are added to it.

    Runs on
    -------
    driver (the command's process)"""
    parser.add_argument("--gcs-endpoint", metavar="URL", default=None,
                        help="Google Cloud Storage endpoint for gs:// URLs (default: Google's; "
                             "an http:// emulator is reached without credentials). Credentials "
                             "from GOOGLE_APPLICATION_CREDENTIALS or the application default "
                             "credentials")
    parser.add_argument("--azure-endpoint", metavar="URL", default=None,
                        help="Azure Blob endpoint for az:// and abfs:// URLs, e.g. "
                             "http://127.0.0.1:10000/devstoreaccount1 for Azurite (default: "
                             "the account's). Credentials from AZURE_STORAGE_ACCOUNT_NAME with "
                             "AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN, a service "
                             "principal (AZURE_CLIENT_ID/SECRET, AZURE_TENANT_ID) or a managed "
                             "identity")


def _fenced_table(args: argparse.Namespace) -> dict[str, Any]:
    """The storage options of ``args.url`` once it is known to hold a fenced Parquet table (a
    Delta table, or nothing, is refused naming the command that fits)."""
    from orderedstream.sinks.deltalog import table_format

    options = storage_options_from_args(args)
    open_location(args.url, "table", options)  # a bad URL, a dead endpoint, no bucket: named
    kind = table_format(args.url, options)
    if kind == "delta":
        raise UnsupportedFormatError(
            f"{args.url} is a Delta table; the sink commands read fenced Parquet tables "
            "(--output-format parquet). Use 'orderedstream table history|verify|compact|vacuum' "
            "for a Delta table")
    if kind is None:
        raise StateNotFoundError(f"{args.url} holds no fenced Parquet table (no _fenced/ log "
                                 "there); check the URL and storage options")
    return options


def _batches(args: argparse.Namespace) -> int:
    from orderedstream.core.commitlog import CommitLog

    log = CommitLog(args.url, _fenced_table(args))
    if log.latest_version() is None:
        print("no commits")
        return 0
    print(f"{'version':>8} {'batch':>8} {'epoch':>6} {'files':>6} {'rows':>10} "
          f"{'removes':>7}  writer")
    for r in log.records():
        batch = "-" if r.batch_id is None else str(r.batch_id)
        print(f"{r.version:>8} {batch:>8} {r.epoch:>6} {len(r.files):>6} {r.rows:>10} "
              f"{len(r.removes):>7}  {r.writer_id}")
    return 0


def _files(args: argparse.Namespace) -> int:
    from orderedstream.sinks.table import FencedTable

    snap = FencedTable(args.url, _fenced_table(args)).snapshot()
    for f in sorted(snap.files, key=lambda f: f.path):
        print(f"{f.size:>12} {f.rows:>10}  {f.path}")
    print(f"{len(snap.files)} files, {snap.rows} rows, version {snap.version}")
    return 0


def verify(url: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Check that every live file of the fenced table at ``url`` exists with its recorded size.

    Parameters
    ----------
    url
        The table root (any fsspec URL).
    storage_options
        fsspec options for ``url``.

    Returns
    -------
    list of str
        One line per problem (``missing: <path>``, ``size mismatch: ...``); empty when the
        table is whole.

    Raises
    ------
    CorruptLogError
        A commit record or live-set checkpoint cannot be read.

    Runs on
    -------
    driver (the command's process)"""
    from orderedstream.sinks.table import FencedTable

    table = FencedTable(url, storage_options)
    problems = []
    for f in table.snapshot().files:
        try:
            size = table.fs.info(table.full_path(f.path))["size"]
        except FileNotFoundError:
            problems.append(f"missing: {f.path}")
            continue
        if int(size) != f.size:
            problems.append(f"size mismatch: {f.path} is {size} bytes, recorded {f.size}")
    return problems


def _verify(args: argparse.Namespace) -> int:
    problems = verify(args.url, _fenced_table(args))
    for line in problems:
        print(line)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


def _compact(args: argparse.Namespace) -> int:
    from orderedstream.sinks.maintenance import compact

    result = compact(args.url, _fenced_table(args), target_file_bytes=parse_size(
        "--target-file-size", args.target_file_size), min_files=args.min_files,
        metadata_compact_interval=args.metadata_compact_interval)
    where = "nothing to compact" if result.record is None else f"version {result.record.version}"
    print(f"compacted {result.removed} files into {result.added} ({result.rows} rows): {where}")
    return 0


def _grace_seconds(args: argparse.Namespace) -> float:
    """``--grace-seconds``, or ``--retention-hours`` (the ``table vacuum`` name) in seconds."""
    if args.retention_hours is not None:
        seconds = float(args.retention_hours) * 3600.0
        given = f"--retention-hours {args.retention_hours:g}"
    elif args.grace_seconds is not None:
        seconds, given = float(args.grace_seconds), f"--grace-seconds {args.grace_seconds:g}"
    else:
        return 24 * 3600.0
    if not seconds >= 0:
        raise OptionError(f"{given} is negative: give 0 or more (files younger than it are kept)")
    return seconds


def _vacuum(args: argparse.Namespace) -> int:
    from orderedstream.sinks.maintenance import vacuum

    result = vacuum(args.url, _fenced_table(args), grace_seconds=_grace_seconds(args),
                    dry_run=args.dry_run)
    for path in result.deleted:
        print(("would delete " if args.dry_run else "deleted ") + path)
    print(f"{len(result.deleted)} file(s) {'to delete' if args.dry_run else 'deleted'}, "
          f"{result.kept_recent} unreferenced file(s) kept (younger than the grace period)")
    return 0


def register(subparsers: Any, name: str = "sink") -> argparse.ArgumentParser:
    """Add ``<name> {batches,files,verify,compact,vacuum}`` to an argparse subparsers object.

    Parameters
    ----------
    subparsers
        What ``ArgumentParser.add_subparsers()`` returned.
    name
        The command's name.

    Returns
    -------
    argparse.ArgumentParser
        The command's parser; each subcommand sets ``func``, which takes the parsed
        arguments and returns the exit code.

    Runs on
    -------
    driver (the command's process)"""
    parser = subparsers.add_parser(name, help="inspect and maintain a fenced Parquet table")
    _add_commands(parser)
    return parser


def _add_commands(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="sink_command", required=True,
                                metavar="{batches,files,verify,compact,vacuum}")
    for command, func, help_text in [
            ("batches", _batches, "list versions: batch id, epoch, files, rows"),
            ("files", _files, "list live files with sizes and row counts"),
            ("verify", _verify, "check every live file exists with its recorded size"),
            ("compact", _compact, "rewrite small files into large ones, atomically"),
            ("vacuum", _vacuum, "delete orphan and retired files older than a grace period")]:
        cmd = sub.add_parser(command, help=help_text, description=help_text)
        cmd.add_argument("url", help="table root (any fsspec URL)")
        cmd.add_argument("--storage-options",
                         help="fsspec options as a JSON object, without secrets (default: "
                              "none)")
        cmd.add_argument("--s3-endpoint",
                         help="S3-compatible endpoint URL (path-style; default: AWS itself); "
                              "credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                              "AWS_PROFILE or a role")
        add_cloud_endpoints(cmd)
        if command == "compact":
            cmd.add_argument("--target-file-size", "--target-size", dest="target_file_size",
                             default="128MB",
                             help="size of the rewritten files, e.g. 64MB (default: 128MB; "
                                  "--target-size, as 'table compact' names it, is the same)")
            cmd.add_argument("--min-files", type=int, default=2,
                             help="rewrite a folder only from this many small files (default: 2)")
            cmd.add_argument("--metadata-compact-interval", type=int, default=10,
                             help="_spark_metadata compaction interval, in versions (default: 10)")
        if command == "vacuum":
            grace = cmd.add_mutually_exclusive_group()
            grace.add_argument("--grace-seconds", type=float, default=None,
                               help="delete only files older than this, in seconds (default: "
                                    "86400, one day)")
            grace.add_argument("--retention-hours", type=float, default=None,
                               help="the same in hours, as 'table vacuum' takes it")
            cmd.add_argument("--dry-run", action="store_true",
                             help="list what would be deleted, delete nothing")
        cmd.set_defaults(func=func)


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m orderedstream.sinks``.

    Parameters
    ----------
    argv
        The arguments after the program name; None: ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit code: 0, or 1 when ``verify`` found problems.

    Raises
    ------
    SystemExit
        Status 2 on bad arguments, or on a pack error (its type and message, printed to
        stderr).

    Runs on
    -------
    driver (the command's process)"""
    parser = argparse.ArgumentParser(prog="python -m orderedstream.sinks", description=__doc__)
    _add_commands(parser)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except OrderedStreamError as exc:
        parser.exit(2, f"{parser.prog}: {type(exc).__name__}: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
