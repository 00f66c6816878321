"""A fork server for the short-lived Python processes Spark starts on a local driver.

In a local session Spark starts a fresh interpreter for each planning step of a Python Data
Source (``python -m pyspark.daemon pyspark.sql.worker.lookup_data_sources``, then
``create_data_source``, ``plan_data_source_read``) and one for the streaming source
(``python -m pyspark.sql.streaming.python_streaming_source_runner``). Each imports pyspark,
pyarrow and the pack's source again, and the source runner's start lies between a query's
start and its first batch (docs/decisions/0008-fork-server.md). The server imports those once
and forks a warm copy per process. Spark is given a launcher as its Python executable: it sends
the runs of ``ROUTED`` modules to the server through ``forkclient`` and ``exec``s the
interpreter for everything else (the stage's worker daemon above all), as it does when no
server answers.

The forked process (``orderedstream.dev.local.forkserve``) gets the client's standard streams,
environment, working folder and arguments, and Python's path as ``python -m`` would build it
from that environment; Spark sees the client (``forkclient``) as the process, which stands in
for it (signals in, exit code out; its death ends the process). ``stop`` (the pack calls it
once the query's first batch runs) ends the forking: the server retires into a small reaper,
so the processes it forked stay in the driver's process tree. Either ends with the driver,
removing the folder, also when the driver is killed.
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from orderedstream.core.scratch import private_folder
from orderedstream.dev.local import forkclient

ROUTED = ("pyspark.daemon", "pyspark.sql.streaming.python_streaming_source_runner")
"""Modules whose ``python -m`` runs go to the server (Spark's planner daemons and the
streaming source runner); they are also imported first, for what they import."""

VERSION_CHECK = "import sys; print('%d.%d' % sys.version_info[:2])"
"""What Spark's JVM runs as ``python -c`` (``PythonUtils.getPythonVersion``) before it starts a
Python planner step or streaming source runner: several times in a query's start, each a fresh
interpreter, one after the other in ``load()``, to print two numbers the launcher already
knows. The launcher answers it itself."""

DISABLE_ENV = "ORDEREDSTREAM_FORK_SERVER"
"""``0`` turns the fork server off (Spark then starts every Python process itself)."""

class ForkServer:
    """A running server: its launcher (give it to Spark as the Python executable) and its
    process. Made by ``start``."""

    def __init__(self, folder: Path, launcher: Path, process: subprocess.Popen[bytes]) -> None:
        self.folder = folder
        self.launcher = str(launcher)
        self.process = process
        self._stopped = False

    def stop(self) -> None:
        """Stop forking: the launcher starts the interpreter from now on. The server process
        retires into ``forkclient.reap`` (a small process): the processes it forked stay in this
        process's tree and their launchers learn their exit codes, and it removes the folder
        if this process is killed."""
        if not self._stopped:
            self._stopped = True
            if self.process.poll() is None:
                self.process.terminate()
        self.process.poll()  # reaps it once it has ended

    def close(self) -> None:
        """End the server, retired or not, and remove the folder with the launcher (at exit:
        the processes it forked end with Spark's JVM, which ends with this process; their
        launchers then learn of it themselves). Killed without a wait: a retired server
        ends only when this process does (``forkclient.reap``), so waiting for it would only
        delay every exit by the wait's full timeout."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: list[ForkServer] = []
_lock = threading.Lock()


def start(python: str, *, environment: Mapping[str, str] | None = None,
          routed: tuple[str, ...] = ROUTED, preload: tuple[str, ...] = ()) -> ForkServer | None:
    """Start a server of ``python`` (the interpreter Spark would run) in the background, with
    ``environment`` (the one Spark's Python processes get from the driver JVM, which the
    forked processes inherit where they are set at start, as ``MALLOC_ARENA_MAX``) for the
    ``python -m`` runs of ``routed`` modules, having imported ``forkserve.PRELOAD`` and ``preload``
    (what they will import: a Data Source's module).

    Parameters
    ----------
    python
        The interpreter Spark would run (its Python executable).
    environment
        Variables over this process's for the server (and so for the processes it forks).
    routed
        The modules whose ``python -m`` runs the launcher sends to the server.
    preload
        Modules the server imports besides ``forkserve.PRELOAD``.

    Returns
    -------
    ForkServer or None
        The server, starting in the background; None when turned off
        (``ORDEREDSTREAM_FORK_SERVER=0``), off Linux, or not possible here (no folder whose
        socket path fits Linux's 107 bytes on a file system that runs programs).

    Runs on
    -------
    driver"""
    if os.environ.get(DISABLE_ENV, "").strip() == "0" or not sys.platform.startswith("linux"):
        return None
    folder = _private_folder()
    if folder is None:
        return None
    sock, launcher = folder / "fork.sock", folder / "python"
    launcher.write_text(launcher_script(python, str(sock), routed,
                                        version=python_version(python)))
    launcher.chmod(0o700)
    env = {**os.environ, **(environment or {})}
    env.setdefault("PYTHONHASHSEED", "0")  # fixed at start: pyspark's default for its processes
    with open(folder / "forkserver.log", "wb") as log:
        process = subprocess.Popen(
            [python, "-u", "-m", "orderedstream.dev.local.forkserve", str(sock), str(os.getpid()),
             ",".join(routed), ",".join(preload)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, close_fds=True)
    server = ForkServer(folder, launcher, process)
    with _lock:
        if not _servers:
            atexit.register(_close_all)
        _servers.append(server)
    return server


def stop_all() -> None:
    """Stop every server this process started, keeping their launchers (the pack calls it
    once a query's first batch runs: by then Spark has started the processes a query needs)."""
    with _lock:
        servers = list(_servers)
    for server in servers:
        server.stop()


def _close_all() -> None:
    with _lock:
        servers = list(_servers)
        _servers.clear()
    for server in servers:
        server.close()


def python_version(python: str) -> str | None:
    """``python``'s ``major.minor`` as ``VERSION_CHECK`` prints it (this interpreter's when it
    is the same file, else asked once).

    Parameters
    ----------
    python
        The interpreter's path.

    Returns
    -------
    str or None
        ``"<major>.<minor>"``; None when it cannot be told (it did not run or answered
        something else)."""
    try:
        if os.path.samefile(python, sys.executable):
            return f"{sys.version_info[0]}.{sys.version_info[1]}"
        done = subprocess.run([python, "-c", VERSION_CHECK], capture_output=True, text=True,
                              timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = done.stdout.strip()
    return answer if answer.replace(".", "", 1).isdigit() else None


def launcher_script(python: str, sock: str, routed: tuple[str, ...] = ROUTED, *,
                    version: str | None = None) -> str:
    """The executable Spark runs as Python: ``routed`` modules to the server, Spark's
    ``VERSION_CHECK`` answered with ``version``, the rest to ``python`` itself.

    Parameters
    ----------
    python
        The interpreter to run (itself, or through the fork client).
    sock
        The server's Unix socket; while it exists, ``routed`` runs go there.
    routed
        The modules whose ``python -m`` runs go to the server.
    version
        ``python``'s ``major.minor``; None: the version check runs ``python`` too.

    Returns
    -------
    str
        The ``/bin/sh`` script's text."""
    py, client, path = shlex.quote(python), shlex.quote(forkclient.__file__), shlex.quote(sock)
    modules = "|".join(shlex.quote(m) for m in routed)
    answer = ("" if version is None else
              f"if [ \"$#\" -eq 2 ] && [ \"$1\" = -c ] && [ \"$2\" = {shlex.quote(VERSION_CHECK)} ]"
              f"; then\n  echo {shlex.quote(version)}\n  exit 0\nfi\n")
    return (f"#!/bin/sh\n"
            f"# orderedstream fork server launcher (orderedstream.dev.local.forkserver)\n"
            f"{answer}"
            f"if [ \"$1\" = -m ] && [ -S {path} ]; then\n"
            f"  case \"$2\" in\n"
            f"    {modules}) exec {py} -I -S {client} {path} {py} \"$@\" ;;\n"
            f"  esac\n"
            f"fi\n"
            f"exec {py} \"$@\"\n")


def _private_folder() -> Path | None:
    """A new 0700 folder for the socket and the launcher (``core.scratch``: where the socket's
    path fits and programs may run; folders of killed drivers are removed first)."""
    return private_folder("orderedstream-fork-", longest_name=len("fork.sock.tmp"),
                          executable=True)
