"""Exact CPU of everything an engine runs, from a CPU-accounting cgroup of its own.

``TreeSampler`` reads each process's CPU every 0.25 s, so a process that lives less than one
interval (Spark's launcher JVM, a planner process, a shell script) is missed or counted short.
Where this process may make a cgroup (root on a machine with cgroup v1's ``cpuacct`` or a
writable cgroup v2 tree), the engine starts inside one and the kernel adds up the CPU of every
process and thread that ever ran in it, however short: ``cpu_seconds`` after the engine ended.
Elsewhere :meth:`EngineCgroup.create` gives ``None`` and the sampled figure stands alone.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOTS = (Path("/sys/fs/cgroup/cpuacct"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
"""Where a cgroup with CPU accounting can be made: v1's ``cpuacct`` hierarchy, else a v2 tree
(``cpu.stat`` exists in every v2 cgroup)."""


class EngineCgroup:
    """A fresh cgroup an engine's command joins before it runs (:meth:`wrap`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.v1 = (path / "cpuacct.usage").exists()

    @classmethod
    def create(cls) -> EngineCgroup | None:
        """A new cgroup under the first writable root with CPU accounting, or ``None``."""
        for root in ROOTS:
            if not ((root / "cpuacct.usage").exists() or (root / "cgroup.controllers").exists()):
                continue
            path = root / f"orderedstream-bench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                path.mkdir()
            except OSError:
                continue
            group = cls(path)
            if group._usage_ns() is not None and group._joinable():
                return group
            group.remove()
        return None

    def _joinable(self) -> bool:
        """Whether a process of ours may move itself in (cgroup v2 also needs the common
        ancestor's permission)."""
        done = subprocess.run(self.wrap(["true"]), capture_output=True, check=False)
        return done.returncode == 0

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the cgroup, then ``exec``s it
        (same pid: a sampler of ``Popen.pid`` sees the engine)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path),
                *argv]

    def cpu_seconds(self, *, settle_s: float = 10.0) -> float | None:
        """User + system CPU of every process that ran in the cgroup, once the ones the engine
        left running have ended (up to ``settle_s``; those still running then are counted as
        far as they got and moved out)."""
        deadline = time.monotonic() + settle_s
        while self._pids() and time.monotonic() < deadline:
            time.sleep(0.1)
        usage = self._usage_ns()
        return None if usage is None else usage / 1e9

    def usage_seconds(self) -> float | None:
        """User + system CPU seconds the cgroup's processes used so far (None: unreadable)."""
        usage = self._usage_ns()
        return None if usage is None else usage / 1e9

    def _usage_ns(self) -> int | None:
        try:
            if self.v1:
                return int((self.path / "cpuacct.usage").read_text())
            for line in (self.path / "cpu.stat").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) * 1000
        except (OSError, ValueError):
            return None
        return None

    def _pids(self) -> list[str]:
        try:
            return (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return []

    def remove(self) -> None:
        """Move any process still in it to the parent cgroup, then delete it."""
        for pid in self._pids():
            with contextlib.suppress(OSError):
                (self.path.parent / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()


@contextlib.contextmanager
def engine_cgroup(enabled: bool = True) -> Iterator[EngineCgroup | None]:
    """A cgroup for one engine run (``None`` when disabled, by ``enabled`` or by the
    environment's ``BENCH_CGROUP=0``, or not possible here), removed after it."""
    enabled = enabled and os.environ.get("BENCH_CGROUP", "1") != "0"
    group = EngineCgroup.create() if enabled else None
    try:
        yield group
    finally:
        if group is not None:
            group.remove()


def with_exact_cpu(figures: dict[str, Any], group: EngineCgroup | None) -> dict[str, Any]:
    """``figures`` (a ``TreeSampler``'s) with ``cpu_s`` from the cgroup where there is one;
    the sampled figure stays as ``cpu_s_sampled``, and ``cpu_source`` says which is which."""
    exact = group.cpu_seconds() if group is not None else None
    out = {**figures, "cpu_s_sampled": figures["cpu_s"], "cpu_source": "psutil samples"}
    if exact is not None:
        out.update(cpu_s=exact, cpu_source="cgroup (every process, however short-lived)")
    return out
