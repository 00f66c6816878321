"""CPU and memory of an engine's whole process tree, sampled from outside it.

Every engine of a side-by-side case is sampled by the case's own process, never by a thread of
the engine's: the sampler's work (``/proc`` reads, the GIL of the process it runs in) is then
neither counted in the engine's CPU nor taken from the engine's interpreter. Reading a
process's PSS (``smaps_rollup``) walks its page tables, which is not cheap for a process as
large as Spark's JVM, so PSS is read once every ``pss_every`` samples; RSS and CPU (cheap) at
every one.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any


class TreeSampler:
    """CPU seconds and peak summed RSS of process ``pid`` and all its descendants, sampled
    every ``interval`` seconds (each process's last seen CPU time counts once). Also the peak
    summed PSS: forked Python workers share their parent daemon's pages, which summed RSS
    counts once per process and PSS divides among the processes sharing them."""

    def __init__(self, pid: int, *, interval: float = 0.25, pss_every: int = 4) -> None:
        self.pid, self.interval, self.pss_every = pid, interval, max(1, pss_every)
        self.cpu: dict[tuple[int, float], float] = {}
        self.cpu_kind: dict[tuple[int, float], str] = {}
        self.peak_mb = 0.0
        self.peak_pss_mb = 0.0
        self.peak_parts: dict[str, float] = {}
        """At the peak: MiB of the JVMs and of the Python processes, and how many of each."""
        self.jvm_threads: dict[tuple[int, int], tuple[str, float]] = {}
        """Each JVM thread's (name, CPU seconds) last seen, keyed by (JVM pid, thread id)."""
        self.rss_series: list[tuple[float, float]] = []
        """(epoch seconds, summed RSS MiB) of every sample."""
        self.last_processes: list[dict[str, Any]] = []
        """The last sample's processes: pid, kind, age in seconds and RSS MiB of each."""
        self._samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu.values())

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds by kind of process (JVM, Python driver, Python workers, ...)."""
        out: dict[str, float] = {}
        for key, seconds in self.cpu.items():
            kind = self.cpu_kind.get(key, "?")
            out[kind] = round(out.get(kind, 0.0) + seconds, 1)
        return out

    def jvm_cpu_by_thread(self) -> dict[str, float]:
        """The JVMs' CPU seconds by kind of thread (a name with its digits dropped: the JIT
        compiler, GC, Spark's task threads, ...), largest first; under 0.05 s left out. Each
        thread's CPU as last sampled: a thread's last interval, and threads that lived less
        than one interval, are missing, so the sum is a little under the JVMs' process CPU."""
        out: dict[str, float] = {}
        for name, seconds in self.jvm_threads.values():
            kind = re.sub(r"[0-9]+", "N", name)
            out[kind] = out.get(kind, 0.0) + seconds
        return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1])
                if v >= 0.05}

    def figures(self) -> dict[str, Any]:
        """The figures a case reports: CPU (total and by kind), peak RSS and its parts, PSS."""
        return {"cpu_s": self.cpu_seconds, "cpu_by_kind": self.cpu_by_kind(),
                "jvm_cpu_by_thread": self.jvm_cpu_by_thread(),
                "peak_rss_mb": self.peak_mb, "peak_pss_mb": self.peak_pss_mb,
                "peak_rss_parts": {k: round(v, 1) for k, v in self.peak_parts.items()}}

    def sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        with_pss = self._samples % self.pss_every == 0
        self._samples += 1
        rss = pss = 0
        parts: dict[str, float] = {}
        seen: dict[int, int] = {}
        listed: list[dict[str, Any]] = []
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    self.cpu[(proc.pid, proc.create_time())] = times.user + times.system
                    mine = proc.memory_info().rss
                    shared = getattr(proc.memory_full_info(), "pss", mine) if with_pss else 0
                    parent = proc.ppid()
                    kind = _kind(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            seen[proc.pid] = mine
            if kind == "jvm":
                self._sample_threads(proc.pid)
            pss += shared
            if mine > 2**26 and seen.get(parent) == mine:
                continue  # a child the JVM is spawning shares its memory until exec: count once
            rss += mine
            key = (proc.pid, proc.create_time())
            if kind != "python" or key not in self.cpu_kind:  # an exiting process shows no argv
                self.cpu_kind[key] = kind
            parts[kind] = parts.get(kind, 0.0) + mine / 2**20
            listed.append({"pid": proc.pid, "kind": kind, "rss_mib": round(mine / 2**20, 1),
                           "age_s": round(time.time() - key[1], 1)})
            parts[f"{kind} processes"] = parts.get(f"{kind} processes", 0) + 1
        self.last_processes = listed
        self.peak_pss_mb = max(self.peak_pss_mb, pss / 2**20)
        self.rss_series.append((time.time(), rss / 2**20))
        if rss / 2**20 > self.peak_mb:
            self.peak_mb, self.peak_parts = rss / 2**20, parts

    def _sample_threads(self, pid: int) -> None:
        """Each thread's name and CPU time, from ``/proc/PID/task/TID/stat`` (utime and stime
        in clock ticks; the name is the kernel's 15-character copy of the JVM's)."""
        tick = os.sysconf("SC_CLK_TCK")
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            self.jvm_threads[(pid, int(tid))] = (name, (int(fields[11]) + int(fields[12])) / tick)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> TreeSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _kind(proc: Any) -> str:
    """A short label of a process of an engine's tree: ``jvm`` or which Python program."""
    if "java" in proc.name():
        return "jvm"
    argv = proc.cmdline()
    if "-m" in argv[:-1]:
        return f"python -m {argv[argv.index('-m') + 1]}"
    if "-c" in argv[:-1]:
        return "python -c (driver)"
    script = next((a for a in argv[1:] if a.endswith(".py")), "")
    return f"python {Path(script).name}" if script else "python"
