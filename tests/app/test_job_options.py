"""The main job's options as the ordered stage gets them (no service)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orderedstream.app.job.pipeline import JobOptions, make_processor
from orderedstream.core.errors import OptionError


def _opts(tmp_path: Path, **extra: object) -> JobOptions:
    return JobOptions(bootstrap="localhost:9092", output=str(tmp_path / "out"),
                      state_location=str(tmp_path / "state"),
                      checkpoint=str(tmp_path / "cp"), **extra)  # type: ignore[arg-type]


def test_state_snapshots_default_to_logs_and_checkpoint_mode_is_kept(tmp_path: Path) -> None:
    assert make_processor(_opts(tmp_path)).options.store_options["changelog"] is True
    checkpoints = make_processor(_opts(tmp_path, state_snapshots="checkpoint"))
    assert checkpoints.options.store_options["changelog"] is False


def test_an_unknown_state_snapshots_mode_names_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"state_snapshots='delta'.*'changelog'.*'checkpoint'"):
        make_processor(_opts(tmp_path, state_snapshots="delta"))
