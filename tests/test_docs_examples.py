"""Every ``python`` example in README.md and docs/ runs as written and its own checks hold.

A ``python`` block is a whole program (its asserts state the printed results the text
describes); fragments and commands with placeholders are ``text`` blocks. Each runs in a fresh
interpreter from a temporary working directory, ``TMPDIR`` there too, so what it leaves goes
with the test's folder. The ``bash`` examples that read the demo's data are run by hand
(CONTRIBUTING.md says how).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(language: str) -> list[tuple[str, str]]:
    """(``file:line``, code) of every fenced block of ``language`` in the docs."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            if match.group(1) == language:
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def test_the_docs_have_python_examples() -> None:
    where = [name for name, _ in blocks("python")]
    assert any(name.startswith("README.md:") for name in where), where


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("where", "code"), blocks("python"), ids=[n for n, _ in blocks("python")])
def test_python_example_runs_as_written(where: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=840, check=False)
    assert done.returncode == 0, f"{where}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
