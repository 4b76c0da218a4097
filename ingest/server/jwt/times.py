"""A user JWT's `times` (`nsc edit user --time hh:mm:ss-hh:mm:ss --locale <zone>`): the
windows of the day in which the user may connect, read in `times_location` (the
server's local zone when it names none).

The rule is the reference's, quirks included: a window whose start is after its end
runs from today's start into tomorrow, so just after midnight it is not open; a client
connected in a window is disconnected when that window ends.
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from typing import Any

_CLOCK = re.compile(r"([01]\d|2[0-3]):([0-5]\d):([0-5]\d)")


def _clock(value: object) -> datetime.time | None:
    match = _CLOCK.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    return datetime.time(*(int(part) for part in match.groups()))


def window_end(limits: dict[str, Any], now: float) -> float | None:
    """When the window open at `now` ends (0: the user has no windows); None when no
    window is open, or the windows or their zone cannot be read."""
    windows = limits.get("times")
    if not windows:
        return 0.0
    location = limits.get("times_location") or limits.get("locale")
    try:
        zone = zoneinfo.ZoneInfo(location) if location else None
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError):
        return None
    current = datetime.datetime.fromtimestamp(now, zone).astimezone(zone)
    if not isinstance(windows, list):
        return None
    for window in windows:
        if not isinstance(window, dict):
            return None
        start, end = _clock(window.get("start")), _clock(window.get("end"))
        if start is None or end is None:
            return None
        opens = datetime.datetime.combine(current.date(), start, current.tzinfo)
        closes = datetime.datetime.combine(current.date(), end, current.tzinfo)
        if start > end:
            closes += datetime.timedelta(days=1)
        if opens < current < closes:
            return closes.timestamp()
    return None
