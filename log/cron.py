"""Six-field cron patterns (`sec min hour dom month dow`), as message schedules use them.

The reference reads them as robfig/cron does: `*` or `?`, numbers, names
(`jan`, `mon`), ranges `a-b`, steps `/n`, lists `a,b`; a day matches on
day-of-month *or* day-of-week when both are restricted, on both when either is
`*`. `next_time` finds the first second after a moment that matches, in a
time zone, searching at most five years ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_DAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (min, max, names) of each field
_BOUNDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, _MONTHS),
    (0, 6, _DAYS),
)
_YEARS_AHEAD = 5


class CronError(ValueError):
    """A pattern the reference refuses (its wording is not part of the API)."""


@dataclass(frozen=True, slots=True)
class _Field:
    values: frozenset[int]
    star: bool  # `*` or `?` without a step: the day rule treats it as "any"


@dataclass(frozen=True, slots=True)
class Cron:
    second: _Field
    minute: _Field
    hour: _Field
    day: _Field
    month: _Field
    weekday: _Field

    def _day_matches(self, t: datetime) -> bool:
        dom = t.day in self.day.values
        dow = (t.isoweekday() % 7) in self.weekday.values
        if self.day.star or self.weekday.star:
            return dom and dow
        return dom or dow

    def next_time(self, after: datetime) -> datetime:
        """The first matching second strictly after `after` (which carries the zone)."""
        t = after.replace(microsecond=0) + timedelta(seconds=1)
        limit = t.year + _YEARS_AHEAD
        while t.year <= limit:
            if t.month not in self.month.values:
                t = _next_month(t)
            elif not self._day_matches(t):
                t = t.replace(hour=0, minute=0, second=0) + timedelta(days=1)
            elif t.hour not in self.hour.values:
                t = t.replace(minute=0, second=0) + timedelta(hours=1)
            elif t.minute not in self.minute.values:
                t = t.replace(second=0) + timedelta(minutes=1)
            elif t.second not in self.second.values:
                t += timedelta(seconds=1)
            else:
                return t
        raise CronError("pattern exceeds maximum range")


def parse(pattern: str) -> Cron:
    fields = pattern.split()
    if len(fields) != len(_BOUNDS):
        raise CronError(f"pattern requires 6 fields, got {len(fields)}")
    return Cron(*(_field(text, bounds) for text, bounds in zip(fields, _BOUNDS, strict=True)))


def _field(text: str, bounds: tuple[int, int, dict[str, int]]) -> _Field:
    values: set[int] = set()
    star = False
    for expr in (part for part in text.split(",") if part):
        got, is_star = _range(expr, bounds)
        values |= got
        star = star or is_star
    return _Field(frozenset(values), star)


def _range(expr: str, bounds: tuple[int, int, dict[str, int]]) -> tuple[set[int], bool]:
    low_bound, high_bound, names = bounds
    range_step = expr.split("/")
    low_high = range_step[0].split("-")
    star = low_high[0] in ("*", "?")
    if star:
        start, end = low_bound, high_bound
    else:
        if len(low_high) > 2:
            raise CronError(f"too many hyphens: {expr}")
        start = _int(low_high[0], names)
        end = _int(low_high[1], names) if len(low_high) == 2 else start
    if len(range_step) > 2:
        raise CronError(f"too many slashes: {expr}")
    step = 1
    if len(range_step) == 2:
        step = _int(range_step[1], {})
        if len(low_high) == 1:
            end = high_bound
        if step > 1:
            star = False
    if start < low_bound or end > high_bound or start > end or step == 0:
        raise CronError(f"range out of bounds: {expr}")
    return set(range(start, end + 1, step)), star


def _int(text: str, names: dict[str, int]) -> int:
    named = names.get(text.lower())
    if named is not None:
        return named
    if not text.lstrip("+-").isdigit():
        raise CronError(f"failed to parse int from {text}")
    value = int(text)
    if value < 0:
        raise CronError(f"negative number ({value}) not allowed: {text}")
    return value


def _next_month(t: datetime) -> datetime:
    year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
    return t.replace(year=year, month=month, day=1, hour=0, minute=0, second=0)


def in_zone(ts_ns: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(ts_ns / 1e9, zone)
