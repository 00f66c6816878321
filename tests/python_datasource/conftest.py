"""Fixtures for the orderedkafka tests (shared broker and Spark come from tests/fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
