"""Timestamps as the JetStream JSON spells them (Go's RFC 3339 with nanoseconds).

Clients parse these strings; Go trims trailing zeros from the fraction and
writes the zero time as year 1, so an empty stream's `first_ts` reads
`0001-01-01T00:00:00Z` exactly as the reference's does.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

ZERO_TIME = "0001-01-01T00:00:00Z"
_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?(?:Z|([+-])(\d\d):(\d\d))",
    re.ASCII,
)


def rfc3339(ts_ns: int) -> str:
    """Format nanoseconds since the epoch; 0 is Go's zero time."""
    if ts_ns == 0:
        return ZERO_TIME
    secs, nanos = divmod(ts_ns, 1_000_000_000)
    base = datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        return f"{base}.{nanos:09d}".rstrip("0") + "Z"
    return base + "Z"


def parse_rfc3339(text: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time, accepted as Go's time.Time is.

    The value wraps to 64 bits as Go's UnixNano does, so far-off times order
    exactly as they do in the reference.
    """
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, sec = (int(g) for g in m.groups()[:6])
    frac, sign, off_h, off_m = m.group(7), m.group(8), m.group(9), m.group(10)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days_in = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
    if not (1 <= month <= 12 and 1 <= day <= days_in[month - 1]):
        raise ValueError("day out of range")
    if hour > 23 or minute > 59 or sec > 59:
        raise ValueError("time out of range")
    offset = 0
    if sign:
        if int(off_h) > 23 or int(off_m) > 59:
            raise ValueError("time zone out of range")
        offset = (int(off_h) * 60 + int(off_m)) * 60 * (1 if sign == "+" else -1)
    secs = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + sec
    nanos = (secs - offset) * 1_000_000_000 + int(((frac or "") + "000000000")[:9])
    return (nanos + 2**63) % 2**64 - 2**63


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (year 0 included)."""
    year -= month <= 2
    era, yoe = divmod(year, 400)
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def now_ns() -> int:
    return time.time_ns()
