"""Registers the state store fixtures (``state_location``, ``make_store``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from statestore_fixtures import make_store, state_location  # noqa: E402,F401
