"""Partitions a process keeps open after ``close`` (``StateStoreOptions.keep_open``), handed
to another process on request.

Opening a partition's RocksDB writes and syncs its MANIFEST and OPTIONS files and lists and
opens its column families, every batch, and a small batch's task opens a dozen (reasons and
figures: docs/decisions/0017-keep-partitions-open.md). So ``close`` of a clean partition
(its local copy holds exactly the version it names) keeps the DB open here instead, and the
next ``open`` of that local copy at that version in this process takes it back as it is.

Spark gives a task to whichever of an executor's Python workers is idle, so the next batch of
a partition often runs in another worker, which then cannot open the DB while this one holds
RocksDB's lock. The keeper writes ``KEPT`` in the copy's folder (its pid and socket) while it
holds the copy's lock; an opener that finds it asks that process, over a Linux abstract Unix
socket served by a daemon thread, to close the DB, and waits for the answer before opening.
A keeper that died released RocksDB's lock with its process (a process of the same pid
started after ``KEPT`` was written is another one). Without abstract sockets (not Linux),
nothing is kept: ``close`` closes. Nothing is kept either without
``ORDEREDSTREAM_PROCESS_TUNING=1`` (``orderedstream.core.tuning``; ``RocksDBStatePartition``
checks it): a library's thread serving other processes is the user's choice.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from orderedstream.core.errors import StateLockedError

_log = logging.getLogger("statestore")

MARKER = "KEPT"
"""The file in a local copy's folder naming the process that keeps its DB open."""
_ANSWER_S = 0.5
"""How long an opener waits between checks that the keeper is still alive."""


@dataclass
class Kept:
    """An open DB of a clean local copy: what ``PartitionDB`` needs to use it again."""

    db: Any
    families: dict[str, Any]
    """Column family name -> rocksdict family (``default`` is the DB itself)."""
    db_name: str
    version: int
    manifest: str | None
    fingerprint: str
    """The RocksDB options it was opened with (``StateStoreOptions`` sizes)."""

    def close(self) -> None:
        """Close the DB (a DB whose folder is gone meanwhile is only logged, at debug).

        Runs on
        -------
        executor"""
        self.families.clear()
        try:
            self.db.close()
        except Exception as exc:  # a DB whose folder was deleted meanwhile, e.g.
            _log.debug("state: closing a kept DB %s: %s", self.db_name, exc)


_lock = threading.Lock()
_kept: OrderedDict[str, Kept] = OrderedDict()
_server: tuple[int, str | None] | None = None
"""(pid, abstract socket name) of this process's keeper thread once started, or (pid, None)
once starting it failed."""
_listener: socket.socket | None = None


def _forget() -> None:
    """In a forked child: the parent's kept DBs are the parent's (their RocksDB threads do not
    exist here), so they are neither used nor ever freed here (freeing closes a DB, which
    deletes the files it thinks obsolete); the parent's listener is closed."""
    global _lock, _server, _listener
    _lock = threading.Lock()
    for kept in _kept.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
    _kept.clear()
    if _listener is not None:
        _listener.close()
    _server = _listener = None


os.register_at_fork(after_in_child=_forget)

_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED,
              errno.EINTR, errno.EPROTO}


def _serve(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError as exc:
            if exc.errno in _TRANSIENT:  # e.g. out of descriptors for a moment: serve on
                time.sleep(0.05)
                continue
            _log.warning("state: the keeper of open partitions stopped: %s", exc)
            return
        with conn:
            try:
                conn.settimeout(5.0)
                data = b""
                while not data.endswith(b"\n") and len(data) < 8192:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                closed = close(data.decode(errors="replace").strip())
                conn.sendall(b"closed\n" if closed else b"none\n")
            except Exception as exc:  # one bad request never ends the keeper
                _log.debug("state: keeper request failed: %s", exc)


def _socket_name() -> str | None:
    """This process's keeper socket, started on first use; None where it cannot be (no
    abstract Unix sockets, no thread): then nothing is kept."""
    global _server, _listener
    if _server is not None and _server[0] == os.getpid():
        return _server[1]
    _server = (os.getpid(), None)
    if not hasattr(socket, "AF_UNIX") or os.uname().sysname != "Linux":
        return None
    name = f"orderedstream-state-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    listener = None
    try:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind("\0" + name)
        listener.listen(64)
        threading.Thread(target=_serve, args=(listener,), name="orderedstream-state-keeper",
                         daemon=True).start()
    except (OSError, RuntimeError) as exc:
        if listener is not None:
            listener.close()
        _log.info("state: partitions are not kept open between uses (%s)", exc)
        return None
    _server, _listener = (os.getpid(), name), listener
    return name


def keep(copy_dir: str, kept: Kept, limit: int) -> bool:
    """Keep ``kept`` open for ``copy_dir``, whose lock the caller holds; False when this process
    cannot keep DBs (the caller closes it). The least recently kept beyond ``limit`` close.

    Parameters
    ----------
    copy_dir
        The local copy's folder (its ``KEPT`` file is written there first).
    kept
        The open DB and what it was opened at.
    limit
        DBs this process keeps at most (``keep_open``; 0 keeps none).

    Runs on
    -------
    executor (the Python worker that opens or closes the partition)"""
    with _lock:
        name = _socket_name() if limit > 0 else None
    if name is None:
        return False
    tmp = os.path.join(copy_dir, f"{MARKER}.tmp")
    try:  # the file first: a DB kept without it could not be asked for
        with open(tmp, "w") as handle:  # the key an opener sends back, as this process has it
            handle.write(f"{os.getpid()} {name}\n{copy_dir}\n")
        os.replace(tmp, os.path.join(copy_dir, MARKER))
    except OSError as exc:  # e.g. the copy's folder was deleted meanwhile
        _log.debug("state: %s not kept open: %s", copy_dir, exc)
        return False
    with _lock:
        _kept[copy_dir] = kept
        _kept.move_to_end(copy_dir)
        while len(_kept) > limit:
            _, old = _kept.popitem(last=False)
            old.close()  # under the lock: a request for it is answered once it is closed
    return True


def take(copy_dir: str) -> Kept | None:
    """This process's kept DB of ``copy_dir`` (the caller holds the copy's lock), no longer
    kept; None if there is none. The caller then calls ``release_elsewhere``.

    Parameters
    ----------
    copy_dir
        The local copy's folder.

    Runs on
    -------
    executor (the Python worker that opens or closes the partition)"""
    with _lock:
        return _kept.pop(copy_dir, None)


def close(copy_dir: str) -> bool:
    """Close this process's kept DB of ``copy_dir``; False if it kept none.

    Parameters
    ----------
    copy_dir
        The local copy's folder (as another process's request names it).

    Runs on
    -------
    executor (the keeper thread, or the opener's own process)"""
    with _lock:
        kept = _kept.pop(copy_dir, None)
        if kept is not None:
            kept.close()
    return kept is not None


def close_under(folder: str) -> None:
    """Close the DBs this process keeps of local copies inside ``folder`` (before deleting it).

    Parameters
    ----------
    folder
        A folder holding local copies.

    Runs on
    -------
    both (wherever local copies are deleted)"""
    prefix = os.path.join(folder, "")
    with _lock:
        for key in [k for k in _kept if k.startswith(prefix)]:
            _kept.pop(key).close()


def close_all() -> None:
    """Close every DB this process keeps (tests; a process about to delete local copies)."""
    with _lock:
        while _kept:
            _kept.popitem(last=False)[1].close()


def release_elsewhere(copy_dir: str, *, timeout_s: float, what: str) -> None:
    """Before opening ``copy_dir``'s DB (the caller holds the copy's lock): if another process
    keeps it open, have it closed; then no ``KEPT`` file is left. ``what`` names the partition
    in the error raised when the keeper neither answers nor ends within ``timeout_s``.

    Parameters
    ----------
    copy_dir
        The local copy's folder.
    timeout_s
        How long to wait for the keeper.
    what
        The partition, as the error names it.

    Raises
    ------
    StateLockedError
        The keeper neither closed the DB nor ended within ``timeout_s``.

    Runs on
    -------
    executor (the Python worker that opens or closes the partition)"""
    path = os.path.join(copy_dir, MARKER)
    try:
        written = os.stat(path).st_mtime
        with open(path) as handle:
            first, _, key = handle.read().partition("\n")
        pid_text, name = first.split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return
    if pid != os.getpid():
        _ask(pid, name, key.strip() or copy_dir, since=written, timeout_s=timeout_s,
             what=f"{what}: process {pid} keeps its local state copy {copy_dir} open and")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _ask(pid: int, name: str, key: str, *, since: float, timeout_s: float, what: str) -> None:
    """Ask keeper ``pid`` to close ``key``'s DB; returns once it did, or is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(_ANSWER_S)
            try:
                conn.connect("\0" + name)
                conn.sendall(key.encode() + b"\n")
                while True:
                    try:
                        if not conn.recv(64):
                            break  # closed without an answer: ask again (or it is gone)
                        return  # "closed" or "none": the DB is not open there
                    except TimeoutError:
                        if not _alive(pid, since) or time.monotonic() >= deadline:
                            break
            except OSError:  # refused (no listener) or a full backlog
                pass
        if not _alive(pid, since):
            return  # its RocksDB lock ended with it
        if time.monotonic() >= deadline:
            raise StateLockedError(
                f"{what} did not close it within {timeout_s:.1f} s (lock_timeout_s, less the "
                "wait for the copy's own lock); a local RocksDB copy can be opened by one "
                "process at a time")
        time.sleep(0.05)


def _alive(pid: int, since: float) -> bool:
    """Whether the process that wrote a ``KEPT`` file at ``since`` still runs (a process of
    that pid started later is another one; an ended one not yet reaped holds nothing)."""
    import psutil

    try:
        process = psutil.Process(pid)
        return bool(process.create_time() <= since + 1.0
                    and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


__all__ = ["MARKER", "Kept", "close", "close_all", "close_under", "keep", "release_elsewhere",
           "take"]
