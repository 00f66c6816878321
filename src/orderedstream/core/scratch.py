"""Private scratch folders for Unix sockets and launchers, and the sweep of those left behind.

A local session keeps some files where a socket's path fits Linux's 107 bytes, so in the temp
folder or ``/tmp`` rather than under the run's own folder: Spark's Unix sockets to its Python
processes, the fork server's socket and launcher. Their owner removes them at exit; a driver
killed with its process group cannot. Each folder records its owner (pid and start time, so a
reused pid does not pass for it), and making a new one removes those whose owner has ended.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

OWNER_FILE = ".owner"
_SOCKET_PATH_MAX = 107
"""Bytes of a Unix socket's path on Linux (``sun_path`` less its final NUL)."""


def _start_time(pid: int) -> str | None:
    """A process's start time since boot (clock ticks), or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_ended(folder: Path) -> bool:
    try:
        pid_text, started = (folder / OWNER_FILE).read_text().split()
    except (OSError, ValueError):
        return False  # no owner recorded (being made, or not ours to judge): kept
    return _start_time(int(pid_text)) != started


def sweep(base: Path, prefix: str) -> list[Path]:
    """Remove this user's ``prefix*`` folders in ``base`` whose recorded owner has ended (a folder
    without an owner file is kept; errors on one folder skip it).

    Parameters
    ----------
    base
        The folder to look in (the temp folder or ``/tmp``).
    prefix
        How the folders' names begin.

    Returns
    -------
    list[Path]
        The folders removed; [] when ``base`` cannot be listed.

    Runs on
    -------
    driver
    """
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    uid = os.getuid()
    for folder in entries:
        if not folder.name.startswith(prefix):
            continue
        with contextlib.suppress(OSError):
            if folder.is_dir() and folder.stat().st_uid == uid and _owner_ended(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def private_folder(prefix: str, *, longest_name: int, executable: bool = False) -> Path | None:
    """Make a new 0700 folder ``<temp folder or /tmp>/<prefix>XXXXXXXX`` owned by this process,
    short enough for Unix sockets inside it. Folders of ``prefix`` left there by ended owners
    are removed first.

    Parameters
    ----------
    prefix
        How the folder's name begins.
    longest_name
        The longest name to be put inside: with it the path must still fit a Linux socket path.
    executable
        Also require a file system that runs programs (not mounted ``noexec``).

    Returns
    -------
    Path or None
        The folder, or None if neither place allows it.

    Runs on
    -------
    driver
    """
    for text in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        base = Path(text)
        if len(text) + 1 + len(prefix) + 8 + 1 + longest_name > _SOCKET_PATH_MAX:
            continue
        try:
            if executable and os.statvfs(base).f_flag & os.ST_NOEXEC:
                continue
            sweep(base, prefix)
            folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        except OSError:
            continue
        started = _start_time(os.getpid())
        if started is not None:  # written whole, then named: a sweep never reads half of it
            tmp = folder / f"{OWNER_FILE}.tmp"
            tmp.write_text(f"{os.getpid()} {started}\n")
            tmp.rename(folder / OWNER_FILE)
        return folder
    return None
