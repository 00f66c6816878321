"""Partitions a process keeps open after ``close`` (``StateStoreOptions.keep_open``), handed
to another process on request.

Opening a partition's RocksDB costs 5-13 ms a batch (its MANIFEST and OPTIONS files are written
and synced, its column families listed and opened), and a small batch's task opens a dozen.
So ``close`` of a clean partition (its local copy holds exactly the version it names) keeps the
DB open here instead, and the next ``open`` of that local copy at that version in this process
takes it back as it is.

Spark gives a task to whichever of an executor's Python workers is idle, so the next batch of
a partition often runs in another worker, which then cannot open the DB while this one holds
RocksDB's lock. The keeper writes ``KEPT`` in the copy's folder (its pid and socket) while it
holds the copy's lock; an opener that finds it asks that process, over a Linux abstract Unix
socket served by a daemon thread, to close the DB, and waits for the answer before opening.
A keeper that died released RocksDB's lock with its process. Without abstract sockets (not
Linux), nothing is kept: ``close`` closes.
"""

from __future__ import annotations

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
_orphans: list[Kept] = []
"""DBs a forked child inherited: never used or closed there (their threads are the parent's)."""


def _forget() -> None:
    global _lock, _server
    _lock = threading.Lock()
    _orphans.extend(_kept.values())
    _kept.clear()
    _server = None


os.register_at_fork(after_in_child=_forget)


def _serve(listener: socket.socket) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
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
            except OSError as exc:
                _log.debug("state: keeper request failed: %s", exc)


def _socket_name() -> str | None:
    """This process's keeper socket, started on first use; None where abstract Unix sockets do
    not exist."""
    global _server
    if _server is not None and _server[0] == os.getpid():
        return _server[1]
    if not hasattr(socket, "AF_UNIX") or not os.uname().sysname == "Linux":
        _server = (os.getpid(), None)
        return None
    name = f"orderedstream-state-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
        listener.listen(16)
    except OSError as exc:
        listener.close()
        _log.info("state: partitions are not kept open between uses (%s)", exc)
        _server = (os.getpid(), None)
        return None
    threading.Thread(target=_serve, args=(listener,), name="orderedstream-state-keeper",
                     daemon=True).start()
    _server = (os.getpid(), name)
    return name


def keep(copy_dir: str, kept: Kept, limit: int) -> bool:
    """Keep ``kept`` open for ``copy_dir``, whose lock the caller holds; False when this process
    cannot keep DBs (the caller closes it). The least recently kept beyond ``limit`` close."""
    with _lock:
        name = _socket_name() if limit > 0 else None
    if name is None:
        return False
    tmp = os.path.join(copy_dir, f"{MARKER}.tmp")
    try:  # the file first: a DB kept without it could not be asked for
        with open(tmp, "w") as handle:
            handle.write(f"{os.getpid()} {name}\n")
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
    kept, its ``KEPT`` file removed; None if there is none."""
    with _lock:
        kept = _kept.pop(copy_dir, None)
    if kept is not None:
        try:
            os.unlink(os.path.join(copy_dir, MARKER))
        except FileNotFoundError:
            pass
    return kept


def close(copy_dir: str) -> bool:
    """Close this process's kept DB of ``copy_dir``; False if it kept none."""
    with _lock:
        kept = _kept.pop(copy_dir, None)
        if kept is not None:
            kept.close()
    return kept is not None


def close_all() -> None:
    """Close every DB this process keeps (tests; a process about to delete local copies)."""
    with _lock:
        while _kept:
            _kept.popitem(last=False)[1].close()


def release_elsewhere(copy_dir: str, *, timeout_s: float, what: str) -> None:
    """Before opening ``copy_dir``'s DB (the caller holds the copy's lock): if another process
    keeps it open, have it closed. ``what`` names the partition in the error raised when the
    keeper neither answers nor dies within ``timeout_s``."""
    path = os.path.join(copy_dir, MARKER)
    try:
        with open(path) as handle:
            pid_text, name = handle.read().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return
    if pid != os.getpid():
        _ask(pid, name, copy_dir, timeout_s, what)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _ask(pid: int, name: str, copy_dir: str, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect("\0" + name)
            conn.sendall(copy_dir.encode() + b"\n")
        except OSError:  # the keeper is gone (its RocksDB lock with it)
            return
        conn.settimeout(_ANSWER_S)
        while True:
            try:
                conn.recv(64)  # "closed" / "none", or the connection closed: done either way
                return
            except TimeoutError:
                if not _alive(pid) or time.monotonic() >= deadline:
                    break
            except OSError:
                return
    if _alive(pid):
        raise StateLockedError(
            f"{what}: process {pid} keeps its local state copy {copy_dir} open and did not "
            f"close it within {timeout_s:.0f} s (lock_timeout_s); a local RocksDB copy can be "
            "opened by one process at a time")


def _alive(pid: int) -> bool:
    import psutil

    return bool(psutil.pid_exists(pid))


__all__ = ["MARKER", "Kept", "close", "close_all", "keep", "release_elsewhere", "take"]
