"""The fork server's own process (``python -m orderedstream.dev.local.forkserve``, started by
``orderedstream.dev.local.forkserver.start``): import what Spark's routed Python processes import,
then accept their launchers' requests, fork a process per request that becomes what
``python -m MODULE`` would have been in the caller's environment, and report each one's exit
code; on SIGTERM, retire into ``forkclient.reap`` while forked processes still run.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import marshal
import os
import pkgutil
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import traceback
from typing import Any, NoReturn

from orderedstream.dev.local import forkclient
from orderedstream.dev.local.pydaemon import installed_jar_entries, installed_zip_entries

PRELOAD = ("pyspark", "pyspark.worker", "pyspark.worker_util", "pyspark.sql.datasource",
           "pyspark.sql.worker.lookup_data_sources", "pyspark.sql.worker.create_data_source",
           "pyspark.sql.worker.plan_data_source_read", "pyarrow")
"""Imported before forking: what the routed processes import (with the ``pyspark_*`` Data
Source registrations on the path and the caller's ``preload``)."""

_LENGTH = struct.Struct("!I")
_INT = struct.Struct("!i")
_MAX_REQUEST = 16 << 20


def _preload(routed: tuple[str, ...], preload: tuple[str, ...]) -> None:
    """Import what the routed processes import; a module that fails is left to them."""
    names = [*PRELOAD, *preload, *routed,
             *(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_"))]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the forked process imports it again
            print(f"forkserver: not preloaded: {name}: {exc!r}", file=sys.stderr)
    for name in routed:  # run afresh as __main__ by runpy, as python -m does
        sys.modules.pop(name, None)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection")
        data += chunk
    return bytes(data)


def _read_request(conn: socket.socket, routed: tuple[str, ...]
                  ) -> tuple[dict[str, Any], list[int]]:
    msg, ancillary, _, _ = conn.recvmsg(_LENGTH.size, socket.CMSG_SPACE(4 * 4))
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += list(struct.unpack(f"{usable // 4}i", data[:usable]))
    try:
        msg += _recv_exact(conn, _LENGTH.size - len(msg))
        (length,) = _LENGTH.unpack(msg)
        if length > _MAX_REQUEST:
            raise ValueError(f"request of {length} bytes")
        request = marshal.loads(_recv_exact(conn, length))
        argv = request["argv"]
        if len(fds) != 4 or len(argv) < 2 or argv[0] != "-m" or argv[1] not in routed:
            raise ValueError(f"not a routed module run: {argv[:2]!r} with {len(fds)} fds")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return request, fds


def serve(sock_path: str, parent: int, routed: tuple[str, ...],
          preload: tuple[str, ...] = ()) -> None:
    """The server's loop: accept, fork, report exits; until the parent is gone or SIGTERM.
    Then, with forked processes still running and the driver alive, the process retires into
    ``forkclient.reap`` (an ``exec``: this call does not return); a killed driver's folder is
    removed.

    Parameters
    ----------
    sock_path
        The Unix socket to listen on (published by a rename once it listens).
    parent
        The driver's process id: the loop ends when it is no longer this process's parent.
    routed
        The modules whose ``python -m`` runs are accepted; other requests are refused.
    preload
        Modules to import before forking, besides :data:`PRELOAD` and ``routed``.

    Runs on
    -------
    driver (the fork server's process)"""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the driver to handle
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    base_path = _base_path()
    _preload(routed, preload)
    wake_r, wake_w = forkclient.sigchld_wakeup()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    watched: list[Any] = [listener, wake_r]
    listener.bind(sock_path + ".tmp")
    listener.listen(16)
    os.rename(sock_path + ".tmp", sock_path)  # appears ready to accept
    waiting: dict[int, int] = {}  # forked pid -> its client's connection (a file descriptor)
    try:
        while not stopping and os.getppid() == parent:
            try:
                ready, _, _ = select.select(watched, [], [], 1.0)
            except InterruptedError:
                continue
            if wake_r in ready:
                forkclient.drain(wake_r)
            forkclient.report_exits(waiting)
            if listener in ready:
                conn, _ = listener.accept()
                try:
                    conn.settimeout(10)
                    request, fds = _read_request(conn, routed)
                except (OSError, ValueError, EOFError, TypeError, KeyError) as exc:
                    print(f"forkserver: refused a request: {exc!r}", file=sys.stderr)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, base_path, [listener, conn],
                           (wake_r, wake_w, *waiting.values()))
                for fd in fds:
                    os.close(fd)
                print(f"forkserver: forked {pid}: python {' '.join(request['argv'])}",
                      file=sys.stderr)
                with contextlib.suppress(OSError):
                    conn.sendall(_INT.pack(pid))
                waiting[pid] = conn.detach()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(sock_path)
    forkclient.report_exits(waiting)
    folder = os.path.dirname(sock_path)
    if os.getppid() != parent:  # the driver is gone (killed): nothing will run the launcher
        shutil.rmtree(folder, ignore_errors=True)
        return
    _retire(waiting, parent, folder)  # until the driver ends, to remove the folder then


def _retire(waiting: dict[int, int], parent: int, folder: str) -> NoReturn:
    """Become ``forkclient.reap`` for the processes still running (same pid: they stay this
    process's children), handing it their clients' connections; it stays, a small process,
    until the driver ends."""
    for fd in waiting.values():
        os.set_inheritable(fd, True)
    pairs = [f"{fd}:{pid}" for pid, fd in waiting.items()]
    signal.set_wakeup_fd(-1)
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-I", "-S", forkclient.__file__, "--reap",
                              str(parent), folder, *pairs])


def _base_path() -> list[str]:
    """This interpreter's path less what ``-m`` (the working folder) and ``PYTHONPATH`` put
    first: the part a forked process keeps under its own."""
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    rest = sys.path[1:]
    return [p for p in rest if p not in own] if own else rest


def _child_path(cwd: str, pythonpath: str, base: list[str]) -> list[str]:
    """Python's path as ``python -m`` builds it in ``cwd`` with ``PYTHONPATH``, less the
    installed pyspark's zip and jars (``dev.local.pydaemon``: the same code, compiled)."""
    entries = [os.path.join(cwd, p) for p in pythonpath.split(os.pathsep) if p]
    path = list(dict.fromkeys([cwd, *entries, *base]))
    dropped = {*installed_zip_entries(path), *installed_jar_entries(path)}
    return [p for p in path if p not in dropped]


def _watch_lifeline(fd: int) -> None:
    """End this process when the client (which Spark holds as the process) ends."""
    def watch() -> None:
        while True:
            try:
                if not os.read(fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        os._exit(1)

    threading.Thread(target=watch, name="forkserver-lifeline", daemon=True).start()


def _child(request: dict[str, Any], fds: list[int], base: list[str],
           sockets: list[socket.socket], server_fds: tuple[int, ...]) -> NoReturn:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in request.get("ignored_signals", ()):  # ignored by the client: as an exec
            signal.signal(signum, signal.SIG_IGN)  # would leave them (SIGINT from the JVM)
        for sock in sockets:
            sock.close()
        for fd in server_fds:  # the wake-up pipe, the other clients' connections
            os.close(fd)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds[:3]:
            if fd > 2:
                os.close(fd)
        _watch_lifeline(fds[3])
        env = {os.fsdecode(k): os.fsdecode(v) for k, v in request["env"].items()}
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        sys.path[:] = _child_path(request["cwd"], env.get("PYTHONPATH", ""), base)
        module, args = request["argv"][1], list(request["argv"][2:])
        sys.argv = [module, *args]
        code = _run(module)
    except BaseException:  # noqa: BLE001 - reported on the process's own stderr
        traceback.print_exc()
    os._exit(code)


def _run(module: str) -> int:
    """``python -m module``: its exit code, after the exit handlers and flushing, as the
    interpreter's own exit does."""
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what the interpreter would print
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def main(argv: list[str]) -> NoReturn:
    """``python -m orderedstream.dev.local.forkserve``: run :func:`serve`, then end the process
    without the interpreter's teardown.

    Parameters
    ----------
    argv
        ``SOCKET PARENT_PID ROUTED PRELOAD``, the last two comma-separated module names."""
    serve(argv[0], int(argv[1]), tuple(m for m in argv[2].split(",") if m),
          tuple(m for m in argv[3].split(",") if m))
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: stop() waits for this


if __name__ == "__main__":
    main(sys.argv[1:])
