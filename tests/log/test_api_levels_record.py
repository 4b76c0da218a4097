"""The API level jetlake reports never claims a level whose features are missing."""

from __future__ import annotations

from log.api_levels import COMPLETE_ABOVE_LEVEL_2
from log.config import API_LEVEL


def test_every_level_up_to_the_reported_one_is_complete() -> None:
    above_two = range(3, API_LEVEL + 1)  # levels 1 and 2: docs/jetstream.md
    assert all(level in COMPLETE_ABOVE_LEVEL_2 for level in above_two)
