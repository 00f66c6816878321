"""The client side of ``orderedstream.dev.local.forkserver``: run as a plain script, no packages.

Started by the fork server's launcher as ``python -I -S forkclient.py SOCKET PYTHON -m MODULE
[ARGS]`` in place of ``python -m MODULE [ARGS]``. It hands its standard streams, working
folder, environment and arguments to the server, which forks a warm copy of itself to run the
module, and then stands in for that process: Spark holds this process as its Python worker, so
a signal to it goes to the forked process, and it exits when that process does, with its exit
code. Where the server cannot be reached it runs the module itself (``exec`` of ``PYTHON``).
Imports only what ``-I -S`` finds in the standard library, so that it starts at once.
``--reap`` is the retired server's last role (``reap``).
"""

from __future__ import annotations

import array
import marshal
import os
import select
import signal
import socket
import struct
import sys
from typing import Any

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
"""Signals to this process that go to the forked process it stands for."""
_WORD_WAIT_S = 10.0
"""How long an ended process's exit code may take to come from the server (which is alive:
a server that ends closes the connection, which ends the wait at once)."""
_LENGTH = struct.Struct("!I")
_INT = struct.Struct("!i")


def _exec_plain(python: str, argv: list[str]) -> None:
    """Run the module in this process, as if the launcher had not intervened."""
    os.execv(python, [python, *argv])


def _receive_int(conn: socket.socket) -> int | None:
    data = b""
    while len(data) < _INT.size:
        chunk = conn.recv(_INT.size - len(data))
        if not chunk:
            return None
        data += chunk
    return int(_INT.unpack(data)[0])


def _wait_exit(conn: socket.socket, pid: int) -> int:
    """The forked process's exit code as the server tells it (negative: the signal that ended
    it); 0 when the server stopped first (the process then ends under another parent, which
    alone sees its code)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    watched: list[Any] = [conn] if pidfd is None else [conn, pidfd]
    while True:
        try:
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.2)
        except InterruptedError:
            continue
        if conn in ready:
            code = _receive_int(conn)
            if code is not None:
                return code
            watched.remove(conn)  # the server stopped: wait for the process itself
        if pidfd is not None and pidfd in ready:
            # Ended: the server's word follows once it has reaped the process (a SIGCHLD away,
            # but slow on a loaded machine: a short wait here gave 0 for a killed process),
            # or the connection closes if the server ended meanwhile.
            if conn in watched and select.select([conn], [], [], _WORD_WAIT_S)[0]:
                code = _receive_int(conn)
                return 0 if code is None else code
            return 0
        if pidfd is None and conn not in watched and not _alive(pid):
            return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    """Hand the run to the fork server and stand in for the forked process; where the server
    cannot be reached or refuses, ``exec`` the interpreter instead (this call then does not
    return).

    Parameters
    ----------
    argv
        ``SOCKET PYTHON -m MODULE [ARGS]``: the server's socket, the interpreter, and the
        arguments of the run.

    Returns
    -------
    int
        The forked process's exit code (128 + the signal's number when a signal ended it;
        0 when the server stopped before it could tell).

    Runs on
    -------
    driver (a process Spark's driver JVM starts)"""
    sock_path, python, rest = argv[0], argv[1], argv[2:]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
    except OSError:
        conn.close()
        _exec_plain(python, rest)
    lifeline_read, lifeline_write = os.pipe()  # the forked process ends when this one does
    # Signals this process was started ignoring (the JVM ignores SIGINT: pyspark starts it so,
    # and its children inherit it) stay ignored in the forked process, as across an exec: a
    # terminal's Ctrl-C to the driver's process group must not end the Python workers.
    ignored = [int(s) for s in _FORWARDED if signal.getsignal(s) == signal.SIG_IGN]
    request = marshal.dumps({"argv": rest, "cwd": os.getcwd(), "env": dict(os.environb),
                             "ignored_signals": ignored})
    fds = array.array("i", [0, 1, 2, lifeline_read])
    try:
        conn.sendmsg([_LENGTH.pack(len(request))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        conn.sendall(request)
        pid = _receive_int(conn)
    except OSError:
        pid = None
    os.close(lifeline_read)
    if pid is None or pid <= 0:  # refused or gone: nothing was started
        conn.close()
        os.close(lifeline_write)
        _exec_plain(python, rest)
        return 1  # not reached

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in _FORWARDED:
        if int(signum) not in ignored:
            signal.signal(signum, forward)
    code = _wait_exit(conn, pid)
    return code if code >= 0 else 128 - code  # a shell's code for a signal


def reap(parent: int, folder: str, pairs: list[str]) -> int:
    """A retired server's last job (``forkserve`` ``exec``s this with the connections of its
    running processes, ``FD:PID``): tell each client its process's exit code once it ends, and
    remove the server's ``folder`` (the launcher) when the driver (``parent``) ends without
    doing so itself (killed). A small process instead of the warm server; the processes stay
    its children, in the driver's process tree.

    Parameters
    ----------
    parent
        The driver's process id.
    folder
        The server's folder (its socket and launcher).
    pairs
        ``FD:PID`` of each running process: its client's connection and its id.

    Returns
    -------
    int
        0, once the driver has ended.

    Runs on
    -------
    driver (the retired fork server's process)"""
    conns = {int(pid): int(fd) for fd, pid in (pair.split(":") for pair in pairs)}
    wake_r, _ = sigchld_wakeup()
    try:
        parent_fd: int | None = os.pidfd_open(parent)
    except (AttributeError, OSError):
        parent_fd = None
    watched = [wake_r] if parent_fd is None else [wake_r, parent_fd]
    # A process that ended while the server turned into this (its SIGCHLD came before the
    # handler above) has no signal left to wake the loop: reap what has ended already.
    report_exits(conns)
    while os.getppid() == parent:
        try:
            ready, _, _ = select.select(watched, [], [], 1.0 if parent_fd is None else None)
        except InterruptedError:
            continue
        if wake_r in ready:
            drain(wake_r)
        report_exits(conns)
        if parent_fd is not None and parent_fd in ready:
            break
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    return 0


def sigchld_wakeup() -> tuple[int, int]:
    """A non-blocking pipe ``(read, write)`` that wakes a ``select`` when a child ends (or
    another signal comes): SIGCHLD handled, the pipe as Python's signal wake-up fd."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r, wake_w


def drain(fd: int) -> None:
    """Read what the signal wake-up pipe holds, until it is empty.

    Parameters
    ----------
    fd
        The pipe's non-blocking read end (from :func:`sigchld_wakeup`)."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def report_exits(conns: dict[int, int]) -> None:
    """Reap the children that ended and write each one's exit code (negative: its signal) to
    its client's connection, which is then closed.

    Parameters
    ----------
    conns
        Child pid -> its client's connection (a file descriptor); each reported one is
        removed."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = conns.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, _INT.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
            os.close(fd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reap"]:
        sys.exit(reap(int(sys.argv[2]), sys.argv[3], sys.argv[4:]))
    sys.exit(main(sys.argv[1:]))
