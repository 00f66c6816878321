"""Test helper: run the ``orderedstream`` CLI as a user would (a subprocess, one stream)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FIRST_CHARS = 300  # the pack's sentence must be within what the user sees first


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600, split: bool = False) -> subprocess.CompletedProcess[str]:
    """``orderedstream ARGS`` with stdout and stderr in one stream, as a terminal shows them
    (``split``: stderr apart, where a failure's report goes after the progress lines)."""
    return subprocess.run([sys.executable, "-m", "orderedstream.app.cli", *args],
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE if split else subprocess.STDOUT, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd,
                          check=False)


def assert_reason_first(result: subprocess.CompletedProcess[str], *needles: str,
                        stream: str = "stdout") -> None:
    """Failed, and every needle is within the first FIRST_CHARS characters of ``stream``."""
    text = getattr(result, stream) or ""
    assert result.returncode != 0, text[-3000:]
    head = text[:FIRST_CHARS]
    for needle in needles:
        assert needle in head, f"{needle!r} not in the first {FIRST_CHARS} chars:\n{head!r}\n" \
                               f"... full output:\n{text[-4000:]}"
