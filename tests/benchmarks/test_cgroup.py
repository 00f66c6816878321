"""The benchmarks' exact CPU accounting (``benchmarks.cases._cgroup``) against the kernel."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.cases._cgroup import EngineCgroup, engine_cgroup, with_exact_cpu

BURN = ("import time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < {s}:\n"
        "    pass\n")


def test_counts_a_short_lived_grandchild_after_it_ended() -> None:
    """A grandchild that burns 0.3 s of CPU and exits is in the total, and so is the
    engine's own CPU; the cgroup is gone afterwards."""
    with engine_cgroup() as group:
        if group is None:
            pytest.skip("this machine lets this process make no cgroup with CPU accounting")
        child = (f"import subprocess, sys\n"
                 f"subprocess.run([sys.executable, '-c', {BURN.format(s=0.3)!r}], check=True)\n"
                 f"{BURN.format(s=0.2)}")
        done = subprocess.run(group.wrap([sys.executable, "-c", child]), check=False)
        assert done.returncode == 0
        cpu = group.cpu_seconds()
        assert cpu is not None and 0.5 <= cpu < 5.0, cpu
        path = group.path
    assert not path.exists()


def test_the_wrapped_command_keeps_its_pid_arguments_and_exit_code() -> None:
    group = EngineCgroup.create()
    if group is None:
        pytest.skip("this machine lets this process make no cgroup with CPU accounting")
    try:
        code = "import os, sys; print(os.getpid(), sys.argv[1:]); sys.exit(3)"
        proc = subprocess.Popen(group.wrap([sys.executable, "-c", code, "a b", "c"]),
                                stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 3
        assert out.split(" ", 1) == [str(proc.pid), "['a b', 'c']\n"]
    finally:
        group.remove()


def test_without_a_cgroup_the_sampled_figure_stands() -> None:
    figures = {"cpu_s": 1.25, "peak_rss_mb": 10.0}
    out = with_exact_cpu(figures, None)
    assert out["cpu_s"] == 1.25 and out["cpu_s_sampled"] == 1.25
    assert out["cpu_source"] == "psutil samples"
