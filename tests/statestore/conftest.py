"""Registers the state store fixtures (``state_location``, ``make_store``)."""

from __future__ import annotations

from tests.statestore.statestore_fixtures import make_store, state_location  # noqa: F401
