"""Times and durations printed the way nats-server's Go code prints them.

Monitoring JSON and error messages are compared with the reference by tools and
tests, so `2m0s`, `1d0h0m5s` and RFC 3339 with nanoseconds must come out alike.
"""

from __future__ import annotations

import math
from typing import Any

from ingest.parser.conf import Table
from log.timefmt import rfc3339

NS = 1_000_000_000


def timestamp(seconds: float) -> str:
    return rfc3339(int(seconds * NS))


def uptime(seconds: float) -> str:
    """nats-server's own uptime format: whole seconds, with days and years (`1d0h0m5s`)."""
    secs = max(int(seconds), 0)
    out = ""
    for value, unit in (
        (secs // 31_536_000, "y"),
        (secs // 86400 % 365, "d"),
        (secs // 3600 % 24, "h"),
        (secs // 60 % 60, "m"),
    ):
        if value or out:
            out += f"{value}{unit}"
    return f"{out}{secs % 60}s"


def _fraction(value: int, unit: int) -> str:
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(), which the reference uses for `rtt`."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_fraction(ns, 1000)}µs"
    if ns < NS:
        return f"{sign}{_fraction(ns, 1_000_000)}ms"
    secs, rest = divmod(ns, NS)
    hrs, mins, secs = secs // 3600, secs // 60 % 60, secs % 60
    prefix = f"{hrs}h{mins}m" if hrs else f"{mins}m" if mins else ""
    return f"{sign}{prefix}{_fraction(secs * NS + rest, NS)}s"


def rtt(seconds: float) -> str:
    """Truncated to microseconds between 1µs and 1ms, as the reference's getRTT does."""
    ns = int(seconds * NS)
    if 1000 < ns < 1_000_000:
        ns -= ns % 1000
    return go_duration(ns)


def number(seconds: float) -> int | float:
    """Go encodes a float64 2.0 as `2`; keep integral values integral."""
    return int(seconds) if float(seconds).is_integer() else seconds


def friendly_bytes(size: int) -> str:
    """A byte count as the reference logs one: binary units, two decimals (`1.86 GB`)."""
    if size < 1024:
        return f"{size} B"
    exp = min(int(math.log(size) / math.log(1024)), 6)
    return f"{size / 1024**exp:.2f} {'KMGTPE'[exp - 1]}B"


def go_type(value: Any) -> str:
    """A config value's Go type as the reference's type errors name it (`%T` of what its
    parser read)."""
    if isinstance(value, Table):
        return "map[string]interface {}"
    return _GO_TYPES.get(type(value), "?")


_GO_TYPES = {bool: "bool", int: "int64", float: "float64", str: "string", list: "[]interface {}"}


def go_value(value: Any) -> str:
    """A value as Go's %v prints the reference's: true/false, empty for unset, a list
    in brackets."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
