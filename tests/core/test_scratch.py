"""Private scratch folders (``orderedstream.core.scratch``): made 0700 with their owner
recorded, where a socket's path fits; the ones whose owner ended (a driver killed with its
process group) are removed when the next one is made, the live ones and the unknown kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orderedstream.core.scratch import OWNER_FILE, private_folder, sweep
from orderedstream.dev.local import forkserver

PREFIX = "orderedstream-scratchtest-"


@pytest.fixture()
def temp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="st", dir="/tmp"))  # short: sockets' paths must fit
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    yield base
    subprocess.run(["rm", "-rf", str(base)], check=False)


def _ended_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_new_folder_is_private_and_names_its_owner(temp: Path) -> None:
    folder = private_folder(PREFIX, longest_name=13)
    assert folder is not None and folder.parent == temp and folder.name.startswith(PREFIX)
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    pid, started = (folder / OWNER_FILE).read_text().split()
    assert int(pid) == os.getpid() and started.isdigit()


def test_folders_of_ended_owners_go_live_and_unknown_ones_stay(temp: Path) -> None:
    ended = temp / f"{PREFIX}ended000"
    live = temp / f"{PREFIX}live0000"
    reused = temp / f"{PREFIX}reused00"
    unknown = temp / f"{PREFIX}unknown0"
    other = temp / "someone-elses-folder"
    for folder in (ended, live, reused, unknown, other):
        folder.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(f"/proc/{sleeper.pid}/stat") as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
        (ended / OWNER_FILE).write_text(f"{_ended_pid()} 12345\n")
        (live / OWNER_FILE).write_text(f"{sleeper.pid} {started}\n")
        (reused / OWNER_FILE).write_text(f"{sleeper.pid} {int(started) - 1}\n")  # pid reused
        (other / OWNER_FILE).write_text(f"{_ended_pid()} 1\n")
        made = private_folder(PREFIX, longest_name=13)
        assert made is not None and made.exists()
        assert not ended.exists() and not reused.exists()
        assert live.exists() and unknown.exists() and other.exists()
        assert sweep(temp, PREFIX) == []  # nothing more to remove
    finally:
        sleeper.kill()
        sleeper.wait()


def test_no_place_where_the_socket_path_fits() -> None:
    assert private_folder(PREFIX, longest_name=200) is None


def test_a_driver_killed_with_its_process_group_leaves_a_fork_folder_the_next_start_removes(
        temp: Path) -> None:
    script = ("import sys, time, tempfile\nfrom orderedstream.dev.local import forkserver\n"
              f"tempfile.tempdir = {str(temp)!r}\n"
              "server = forkserver.start(sys.executable)\n"
              "while not (server.folder / 'fork.sock').exists(): time.sleep(0.05)\n"
              "print(server.folder, flush=True)\ntime.sleep(120)\n")
    env = {k: v for k, v in os.environ.items() if k != forkserver.DISABLE_ENV}
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=env, start_new_session=True)
    assert driver.stdout is not None
    folder = Path(driver.stdout.readline().strip())
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and its server at once: no clean-up
    driver.wait(30)
    time.sleep(0.5)
    assert folder.exists()
    server = forkserver.start(sys.executable)
    assert server is not None
    try:
        assert not folder.exists() and server.folder.parent == temp
    finally:
        server.close()
