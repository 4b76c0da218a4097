"""Timestamps as the JetStream JSON spells them (Go's RFC 3339 with nanoseconds).

Clients parse these strings; Go trims trailing zeros from the fraction and
writes the zero time as year 1, so an empty stream's `first_ts` reads
`0001-01-01T00:00:00Z` exactly as the reference's does.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

ZERO_TIME = "0001-01-01T00:00:00Z"


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
    """Nanoseconds since the epoch of an RFC 3339 time (fraction up to 9 digits)."""
    main, _, rest = text.partition(".")
    if rest:
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits) :]
    else:
        digits, zone = "", main[19:]
        main = main[:19]
    zone = "+00:00" if zone in ("Z", "z", "") else zone
    base = datetime.fromisoformat(main[:19] + zone)
    return int(base.timestamp()) * 1_000_000_000 + int((digits + "000000000")[:9])


def now_ns() -> int:
    return time.time_ns()
