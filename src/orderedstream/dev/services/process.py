"""Background processes that log to a file, are reaped on exit, and can be killed hard.

Every service process starts in its own session (process group) so that stop and kill reach its
children too, and is registered for an ``atexit`` sweep so no test run leaves processes behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from orderedstream.core.errors import ServiceError

_LIVE: weakref.WeakSet[ManagedProcess] = weakref.WeakSet()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, below: int = 50000) -> list[int]:
    """Distinct TCP ports on 127.0.0.1 that are free, each with its port + 10000 free too
    (SeaweedFS's gRPC ports sit at that offset).

    Parameters
    ----------
    count
        How many ports.
    below
        Every port is lower than this.

    Returns
    -------
    list of int
        ``count`` ports, sorted."""
    ports: set[int] = set()
    while len(ports) < count:
        port = free_port()
        if port < below and port + 10000 < 65536:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            ports.add(port)
    return sorted(ports)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` (half a second to answer).

    Parameters
    ----------
    port
        The TCP port.
    host
        The host to connect to.

    Returns
    -------
    bool
        True when the connection was accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(check: Callable[[], bool], timeout: float, what: str, log: Path | None = None,
               process: ManagedProcess | None = None) -> None:
    """Poll ``check`` until it returns true; an exception it raises counts as not yet.

    Parameters
    ----------
    check
        What to poll.
    timeout
        Seconds to wait at most.
    what
        How the error names the service.
    log
        The service's log; its last lines go into the error.
    process
        The service's process: its exit ends the wait at once.

    Raises
    ------
    ServiceError
        ``process`` exited, or ``check`` was not true within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise ServiceError(f"{what}: process exited with {process.returncode()}"
                               f"{_tail(log)}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - the service is not ready yet
            pass
        time.sleep(0.2)
    raise ServiceError(f"{what}: not ready after {timeout:.0f}s{_tail(log)}")


def _tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last lines of {log} ---\n" + "\n".join(text)


class ManagedProcess:
    """One background process with its log file; stop() is graceful, kill() is SIGKILL."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> ManagedProcess:
        """Start the process (appending to its log); returns self."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        log.write(f"\n=== start {self.name}: {' '.join(self.argv)}\n".encode())
        log.flush()
        self._popen = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=self.env, cwd=self.cwd, start_new_session=True,
        )
        log.close()
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        """The process's id (its process group's too); None before :meth:`start`."""
        return self._popen.pid if self._popen else None

    def alive(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    def returncode(self) -> int | None:
        """The exit code; None while it runs or before :meth:`start`."""
        return None if self._popen is None else self._popen.poll()

    def _signal_group(self, sig: int) -> None:
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``timeout``.

        Parameters
        ----------
        timeout
            Seconds the process has to exit after SIGTERM."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(10)

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as a crash would."""
        if self._popen is None:
            return
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(10)

    def tail(self, lines: int = 40) -> str:
        """The last lines of the process's log, with a header naming the log.

        Parameters
        ----------
        lines
            How many lines.

        Returns
        -------
        str
            The lines, or ``""`` when there is no log yet."""
        return _tail(self.log_path, lines)


@atexit.register
def _reap_all() -> None:
    for proc in list(_LIVE):
        proc.kill()
