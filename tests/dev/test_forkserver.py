"""The fork server (``orderedstream.dev.local.forkserver``) as Spark uses it, through its launcher:
a routed ``python -m`` run is forked from the warm server and sees what a fresh interpreter
would (streams, environment, working folder, arguments, path, ``__main__``, exit code);
signals to the launcher reach it and the launcher's death ends it; without a server, and for
every other command, the launcher runs the interpreter itself. Real processes throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orderedstream.dev.local import forkserver

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests.dev.fork_probe"


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[forkserver.ForkServer]:
    monkeypatch.chdir(ROOT)  # the server imports the probe module from here
    monkeypatch.delenv(forkserver.DISABLE_ENV, raising=False)
    started = forkserver.start(sys.executable, routed=(PROBE,))
    assert started is not None
    deadline = time.monotonic() + 60
    while not (started.folder / "fork.sock").exists():
        assert started.process.poll() is None, (started.folder / "forkserver.log").read_text()
        assert time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.05)
    yield started
    started.close()


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _run(executable: str, *args: str, cwd: Path, stdin: str = "hello\n",
         **env: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run([executable, "-m", PROBE, *args], input=stdin, capture_output=True,
                          text=True, cwd=cwd, env=_env(**env), timeout=60, check=False)
    report = json.loads(proc.stdout.splitlines()[0])
    return proc.returncode, report, proc.stderr


def test_a_routed_run_is_forked_and_sees_what_a_fresh_interpreter_sees(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    code, forked, err = _run(server.launcher, "exit3", cwd=tmp_path, PROBE_VALUE="routed")
    plain_code, plain, plain_err = _run(sys.executable, "exit3", cwd=tmp_path,
                                        PROBE_VALUE="routed")
    assert forked["ppid"] == server.process.pid  # forked by the server, not started
    assert forked["pyarrow_loaded"] is True and plain["pyarrow_loaded"] is False  # warm
    assert code == plain_code == 3
    assert "probe on stderr" in err and "probe on stderr" in plain_err
    for key in ("cwd", "argv", "value", "path", "stdin", "name"):
        assert forked[key] == plain[key], key
    assert forked["name"] == "__main__" and forked["value"] == "routed"
    assert forked["path"] == [str(tmp_path), str(ROOT)]  # python -m: the folder, PYTHONPATH
    log = (server.folder / "forkserver.log").read_text()
    assert f"forked {forked['pid']}: python -m {PROBE} exit3" in log


def test_a_signal_to_the_launcher_ends_the_forked_process_with_its_code(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    proc, child = _sleeping(server, tmp_path)
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)  # what Spark's destroy() does
    assert proc.wait(30) == 128 + signal.SIGTERM
    _gone(child)


def test_a_killed_launcher_takes_its_forked_process_with_it(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    proc, child = _sleeping(server, tmp_path)
    proc.kill()  # destroyForcibly(): no chance to forward anything
    proc.wait(30)
    _gone(child)


def test_a_stopped_server_retires_until_its_processes_end_and_the_launcher_falls_back(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    proc, child = _sleeping(server, tmp_path)
    server.stop()
    deadline = time.monotonic() + 15
    while "--reap" not in _cmdline(server.process.pid):  # the same process, a few MiB
        assert time.monotonic() < deadline, _cmdline(server.process.pid)
        time.sleep(0.05)
    assert not (server.folder / "fork.sock").exists()
    assert proc.poll() is None and _alive(child)  # still running, still its child
    assert _parent(child) == server.process.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM  # the exit code still comes through
    _gone(child)
    assert server.process.poll() is None  # kept until the driver ends, for its folder

    # no server: the launcher runs the interpreter itself (the run's parent is this test)
    code, report, _ = _run(server.launcher, "exit0", cwd=tmp_path)
    assert code == 0 and report["pyarrow_loaded"] is False and report["ppid"] == os.getpid()


def test_commands_that_are_not_routed_run_the_interpreter(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    proc = subprocess.run([server.launcher, "-c", "import os, sys; print(os.getppid(), "
                           "sys.executable, sys.argv[1:])", "a b", "c"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True)
    ppid, executable, argv = proc.stdout.strip().split(" ", 2)
    assert int(ppid) == os.getpid() and executable == sys.executable
    assert argv == "['a b', 'c']"
    log = (server.folder / "forkserver.log").read_text()
    assert "forked" not in log


def test_the_launcher_answers_sparks_version_check_itself(
        server: forkserver.ForkServer, tmp_path: Path) -> None:
    """Spark runs ``python -c VERSION_CHECK`` before each planner step: the launcher prints
    what the interpreter would, without starting one."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    check = [server.launcher, "-c", forkserver.VERSION_CHECK]
    answered = subprocess.run(check, capture_output=True, text=True, timeout=60, check=True)
    plain = subprocess.run([sys.executable, "-c", forkserver.VERSION_CHECK],
                           capture_output=True, text=True, timeout=60, check=True)
    assert answered.stdout == plain.stdout == f"{version}\n"
    # not started: a launcher of an interpreter that does not exist answers the same
    missing = tmp_path / "no-such-python"
    launcher = tmp_path / "python"
    launcher.write_text(forkserver.launcher_script(str(missing), str(tmp_path / "fork.sock"),
                                                   version="3.11"))
    launcher.chmod(0o700)
    alone = subprocess.run([str(launcher), "-c", forkserver.VERSION_CHECK],
                           capture_output=True, text=True, timeout=60, check=True)
    assert alone.stdout == "3.11\n"
    # any other command (one more argument, another script) goes to the interpreter
    other = subprocess.run([str(launcher), "-c", forkserver.VERSION_CHECK, "x"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert other.returncode != 0 and "no-such-python" in other.stderr
    assert forkserver.python_version(sys.executable) == version
    assert forkserver.python_version(str(missing)) is None


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forkserver.DISABLE_ENV, "0")
    assert forkserver.start(sys.executable) is None


def _sleeping(server: forkserver.ForkServer, tmp_path: Path
              ) -> tuple[subprocess.Popen[str], int]:
    """The launcher running the probe until signalled, and the forked process's pid."""
    proc = subprocess.Popen([server.launcher, "-m", PROBE, "sleep"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=_env())
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("x\n")
    proc.stdin.flush()
    child: int = json.loads(proc.stdout.readline())["pid"]
    return proc, child


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _gone(pid: int) -> None:
    deadline = time.monotonic() + 15
    while _alive(pid):
        assert time.monotonic() < deadline, f"forked process {pid} still running"
        time.sleep(0.05)


@pytest.mark.parametrize("retired", [False, True], ids=["serving", "retired"])
def test_a_killed_driver_takes_the_server_and_its_folder_with_it(retired: bool) -> None:
    script = ("import os, sys, time\nfrom orderedstream.dev.local import forkserver\n"
              "server = forkserver.start(sys.executable)\n"
              "while not (server.folder / 'fork.sock').exists(): time.sleep(0.05)\n"
              + ("server.stop()\n" if retired else "") +
              "print(server.folder, server.process.pid, flush=True)\ntime.sleep(120)\n")
    env = {k: v for k, v in os.environ.items() if k != forkserver.DISABLE_ENV}
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env=env)
    assert driver.stdout is not None
    folder_text, pid_text = driver.stdout.readline().split()
    folder, pid = Path(folder_text), int(pid_text)
    deadline = time.monotonic() + 30
    while retired and "--reap" not in _cmdline(pid):
        assert time.monotonic() < deadline, _cmdline(pid)
        time.sleep(0.05)
    assert folder.exists()
    driver.kill()  # no exit handlers run
    driver.wait(30)
    deadline = time.monotonic() + 20
    while folder.exists() or _alive(pid):
        assert time.monotonic() < deadline, f"{folder} or server {pid} left behind"
        time.sleep(0.1)


def test_a_driver_that_exits_ends_its_retired_server_and_removes_its_folder() -> None:
    # A retired server stays until its driver ends (forkclient.reap); the driver's exit
    # handler (forkserver.close) ends it and removes the folder with the launcher.
    script = ("import sys, time\nfrom orderedstream.dev.local import forkserver\n"
              "server = forkserver.start(sys.executable)\n"
              "while not (server.folder / 'fork.sock').exists(): time.sleep(0.05)\n"
              "server.stop()\n"
              "while '--reap' not in open(f'/proc/{server.process.pid}/cmdline').read():\n"
              "    time.sleep(0.05)\n"
              "print(server.folder, server.process.pid, flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k != forkserver.DISABLE_ENV}
    driver = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=120, check=False)
    assert driver.returncode == 0, driver.stderr[-2000:]
    folder_text, pid_text = driver.stdout.split()
    assert not Path(folder_text).exists()
    assert not _alive(int(pid_text))  # ended and reaped by the driver before it exited
