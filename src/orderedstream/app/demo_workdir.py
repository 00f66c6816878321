"""The demo's work folder: what it holds, whether a run starts clean or continues.

Layout (default ``./orderedstream-demo/``)::

    .orderedstream-demo   marker: this folder was made by the demo (``--clean`` checks it)
    runs.json             one entry per demo run (start, verdict), the wave counter
    services.json         the embedded services' ports (reused by ``orderedstream services``)
    kafka/  s3/           the embedded Kafka broker's and S3 server's data and logs
    output/               the output table, on local disk
    checkpoint/           the Spark checkpoint of the demo's query
    logs/                 Spark, py4j and Kafka client logs of each run
    spark/                Spark's scratch space

A run continues when the folder holds a previous run's checkpoint and both services' data;
it starts clean when the folder is new or empty. Anything in between is refused with what is
missing (``--clean`` starts over).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orderedstream.core.errors import OptionError

MARKER = ".orderedstream-demo"


@dataclass(frozen=True)
class Workdir:
    """The demo's work folder, as :func:`prepare` left it for this run."""

    root: Path
    """The folder, absolute."""
    continues: bool
    """Whether this run continues a previous run's checkpoint and services' data."""
    wave: int
    """How many runs this folder saw before this one (0: a clean start)."""

    @property
    def output(self) -> Path:
        """The output table's folder."""
        return self.root / "output"

    @property
    def checkpoint(self) -> Path:
        """The Spark checkpoint of the demo's query."""
        return self.root / "checkpoint"

    @property
    def log_path(self) -> Path:
        """This run's log file for Spark, py4j and the Kafka clients."""
        return self.root / "logs" / f"run-{self.wave + 1}.log"

    def record_run(self, **fields: Any) -> None:
        """Append this run, with the time it finished, to the folder's ``runs.json``.

        Parameters
        ----------
        **fields
            What to keep about the run (e.g. ``verdict``, ``batches``), JSON-ready."""
        runs = _runs(self.root)
        runs.append({"run": self.wave + 1, "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     **fields})
        (self.root / "runs.json").write_text(json.dumps(runs, indent=1) + "\n")


def _runs(root: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((root / "runs.json").read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _has_previous_run(root: Path) -> dict[str, bool]:
    return {"Spark checkpoint (checkpoint/commits)": (root / "checkpoint" / "commits").is_dir(),
            "Kafka data (kafka/data/meta.properties)":
                (root / "kafka" / "data" / "meta.properties").exists(),
            "S3 data (s3/data)": (root / "s3" / "data").is_dir()}


def prepare(root: Path, *, clean: bool) -> Workdir:
    """Create, clean or reopen the demo's folder; says nothing (the caller reports).

    Parameters
    ----------
    root
        The folder (``--workdir``); created if missing.
    clean
        Delete the folder's contents first (only a folder the demo made).

    Returns
    -------
    Workdir
        The folder, with whether this run continues and its wave.

    Raises
    ------
    OptionError
        ``root`` is a file; it holds files the demo did not make; or it holds part of a
        previous run only (checkpoint, Kafka or S3 data missing)."""
    root = Path(root).absolute()
    if root.exists() and not root.is_dir():
        raise OptionError(f"--workdir {root} is a file; give a folder (created if missing)")
    contents = [p for p in root.iterdir()] if root.is_dir() else []
    if clean and contents:
        if not (root / MARKER).exists():
            raise OptionError(
                f"--clean refuses to delete {root}: it was not made by the demo (no {MARKER} "
                "file in it). Give an empty or new folder with --workdir")
        shutil.rmtree(root)
        contents = []
    if contents and not (root / MARKER).exists():
        raise OptionError(f"--workdir {root} holds files that are not the demo's (no {MARKER} "
                          "file); give a new or empty folder")
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("made by 'orderedstream demo'; --clean deletes this folder\n")
    found = _has_previous_run(root)
    if all(found.values()):
        return Workdir(root, continues=True, wave=max(len(_runs(root)), 1))
    if any(found.values()) or (root / "output").exists():
        missing = ", ".join(name for name, ok in found.items() if not ok)
        raise OptionError(
            f"--workdir {root} holds part of a previous run but not all of it (missing: "
            f"{missing}), so it can neither continue nor start clean without losing data. "
            "Run with --clean to start over, or give another --workdir")
    return Workdir(root, continues=False, wave=0)
