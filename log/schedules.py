"""Message schedules (`allow_msg_schedules`): a message that publishes others later.

A message carrying `Nats-Schedule` (`@at <time>`, `@every <duration>`, a
six-field cron pattern or `@hourly`/`@daily`/…) and `Nats-Schedule-Target`
is a schedule: it is stored as a rollup of its own subject (one schedule per
subject), and when it is due the stream's leader publishes its body (or the
newest message of `Nats-Schedule-Source`) on the target, with
`Nats-Scheduler: <schedule subject>` and `Nats-Schedule-Next: <next time>` or
`purge` for a one-off, whose commit then purges the schedule.

`check` holds a publish to the reference's rules, in its order. `Book` is
the schedules a member knows of, kept by every member as it applies entries
(so a new leader fires them), rebuilt from the store at start; only the
leader fires, and marks a schedule in flight until its firing applies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ingest.parser.subjects import is_valid_subject, subjects_overlap
from log import cron, errors, publish
from log.errors import ApiError
from log.publish import go_duration_ns
from log.segments.api import MsgStore, StoredMsg
from log.timefmt import parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from log.config import StreamConfig

SCHEDULE = "Nats-Schedule"
TIME_ZONE = "Nats-Schedule-Time-Zone"
TTL = "Nats-Schedule-TTL"
ROLLUP = "Nats-Schedule-Rollup"
TARGET = "Nats-Schedule-Target"
SOURCE = "Nats-Schedule-Source"
SCHEDULER = "Nats-Scheduler"
NEXT = "Nats-Schedule-Next"
PURGE = "purge"
log = logging.getLogger("jetlake.schedules")
_NS = 1_000_000_000
_PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
# What a fired message must not inherit from its schedule (it would act twice).
_STRIPPED_PREFIXES = ("nats-schedule", "nats-expected-")
_STRIPPED = {"nats-msg-id", "nats-ttl", "nats-rollup"}

Headers = Mapping[str, list[str]]


def touches(headers: Headers) -> bool:
    """Whether a publish carries any header the schedule rules look at."""
    return SCHEDULE in headers or TIME_ZONE in headers or NEXT in headers or SCHEDULER in headers


def next_fire(headers: Headers, ts: int, now: int) -> tuple[int, bool] | None:
    """(when, repeats) of a schedule set at `ts`; None when it names none; a
    past repeat skips ahead so a restart fires once, not once per missed turn."""
    zone = _zone(headers)
    pattern = _first(headers, SCHEDULE)
    if not pattern:
        return None
    if pattern.startswith("@at "):
        if zone is not None:
            raise errors.schedules_pattern_invalid()
        try:
            return parse_rfc3339(pattern[4:]), False
        except ValueError:
            raise errors.schedules_pattern_invalid() from None
    if pattern.startswith("@every "):
        every = go_duration_ns(pattern[7:])
        if zone is not None or every is None or every < _NS:
            raise errors.schedules_pattern_invalid()
        at = _round_second(ts) + every
        return (at if at >= now else _round_second(now) + every), True
    try:
        rule = cron.parse(_PREDEFINED.get(pattern, pattern))
        at = _cron_next(rule, ts, zone)
        if at < now:
            at = _cron_next(rule, _round_second(now), zone)
    except cron.CronError:
        raise errors.schedules_pattern_invalid() from None
    return at, True


def check(
    cfg: StreamConfig,
    subject: str,
    headers: Headers,
    now: int,
    store: MsgStore,
    read_headers: Callable[[bytes], Headers],
) -> bool:
    """A publish's schedule headers against the reference's rules; True when the message
    is a schedule (it must become a rollup of its subject)."""
    allowed = cfg.allow_msg_schedules
    try:
        fire = next_fire(headers, now, now)
    except ApiError:
        if not allowed:
            raise errors.schedules_disabled() from None
        raise
    if fire is not None:
        _check_schedule(allowed, cfg.allow_msg_ttl, cfg.subjects, subject, headers)
    next_text = _first(headers, NEXT)
    if next_text:
        if next_text != PURGE:
            raise errors.schedules_scheduler_invalid()
        scheduler = _first(headers, SCHEDULER)
        if not scheduler or scheduler == subject or not _publishable(scheduler):
            raise errors.schedules_scheduler_invalid()
        if not allowed:
            raise errors.schedules_disabled()
        last = store.load_last(scheduler)
        if last is not None and not (last.hdr and SCHEDULE in read_headers(last.hdr)):
            raise errors.schedules_scheduler_invalid()
    elif SCHEDULER in headers:
        raise errors.schedules_scheduler_invalid()
    return fire is not None


def _check_schedule(
    allowed: bool,
    allow_ttl: bool,
    stream_subjects: tuple[str, ...],
    subject: str,
    headers: Headers,
) -> None:
    if not allowed:
        raise errors.schedules_disabled()
    ttl = _first(headers, TTL)
    if ttl:
        try:
            publish.parse_ttl(ttl)
        except ApiError:
            raise errors.schedules_ttl_invalid() from None
    if _first(headers, ROLLUP) not in ("", "sub"):
        raise errors.schedules_rollup_invalid()
    if ttl and not allow_ttl:
        raise errors.ttl_disabled()
    target = _first(headers, TARGET)
    if not target or not _publishable(target) or target == subject:
        raise errors.schedules_target_invalid()
    source = _first(headers, SOURCE)
    if source and (source in (target, subject) or not _publishable(source)):
        raise errors.schedules_source_invalid()
    if not any(subjects_overlap(s, target) for s in stream_subjects):
        raise errors.schedules_target_invalid()
    if source and not any(subjects_overlap(s, source) for s in stream_subjects):
        raise errors.schedules_source_invalid()
    if _first(headers, publish.ROLLUP) not in ("", "sub"):
        raise errors.schedules_rollup_invalid()


@dataclass(frozen=True, slots=True)
class Firing:
    """A due schedule turned into the message the leader publishes."""

    schedule_subject: str
    target: str
    hdr: bytes
    data: bytes


def fire(
    schedule: StoredMsg,
    due: int,
    now: int,
    read_headers: Callable[[bytes], Headers],
    last_of: Callable[[str], StoredMsg | None],
) -> Firing | None:
    """The message a due schedule publishes; None if the stored schedule is no longer one."""
    headers = read_headers(schedule.hdr) if schedule.hdr else {}
    try:
        when = next_fire(headers, due, now)
    except ApiError:
        return None
    target = _first(headers, TARGET)
    if when is None or not target:
        return None
    ttl, rollup = _first(headers, TTL), _first(headers, ROLLUP)
    body_msg = schedule
    source = _first(headers, SOURCE)
    if source:
        body_msg = last_of(source) or schedule
    kept = {
        name: values
        for name, values in (read_headers(body_msg.hdr) if body_msg.hdr else {}).items()
        if not name.lower().startswith(_STRIPPED_PREFIXES) and name.lower() not in _STRIPPED
    }
    lines = [f"{name}: {value}" for name, values in kept.items() for value in values]
    lines.append(f"{SCHEDULER}: {schedule.subject}")
    lines.append(f"{NEXT}: {_in_zone_text(when[0], _zone(headers)) if when[1] else PURGE}")
    if ttl:
        lines.append(f"{publish.TTL}: {ttl}")
    if rollup:
        lines.append(f"{publish.ROLLUP}: {rollup}")
    hdr = ("NATS/1.0\r\n" + "".join(line + "\r\n" for line in lines) + "\r\n").encode(
        "utf-8", "surrogateescape"
    )
    return Firing(schedule.subject, target, hdr, body_msg.data)


def fire_due(
    book: Book, store: MsgStore, now: int, publish_fn: Callable[[str, bytes, bytes], None]
) -> None:
    """The leader publishes what due schedules publish (its clock decides, as for
    expiry); a schedule stays in flight until its firing applies, so it fires once, and
    one whose firing is refused stays in flight until the leadership moves."""
    for subject, seq, due in book.take_due(now):
        msg = store.load(seq)
        last = store.load_last(subject)
        firing = None
        if msg is not None and last is not None and last.seq == seq:
            firing = fire(msg, due, now, book.read_headers, store.load_last)
        if firing is None:
            book.cancel(subject)  # deleted, replaced, or no longer a valid schedule
            continue
        try:
            publish_fn(firing.target, firing.hdr, firing.data)
        except ApiError as err:
            log.warning("schedule %s not fired on %s: %s", subject, firing.target, err)


class Book:
    """Schedules by subject: (seq of the schedule message, when it is due)."""

    def __init__(self, read_headers: Callable[[bytes], Headers]) -> None:
        self.read_headers = read_headers
        self._due: dict[str, tuple[int, int]] = {}
        self._inflight: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._due)

    def applied(self, subject: str, seq: int, ts: int, headers: Headers, now: int) -> bool:
        """A message stored: it sets, replaces, moves or cancels a schedule. True when a
        schedule was set or moved (the leader's timer may need to fire sooner)."""
        fire_at = None
        if SCHEDULE in headers:
            try:
                fire_at = next_fire(headers, ts, now)
            except ApiError:
                fire_at = None
        moved = fire_at is not None
        if fire_at is not None:
            self._due[subject] = (seq, fire_at[0])
            self._inflight.discard(subject)
        elif SCHEDULER not in headers:
            self.cancel(subject)
        next_text = _first(headers, NEXT)
        scheduler = _first(headers, SCHEDULER)
        if next_text and next_text != PURGE and scheduler in self._due:
            try:
                at = parse_rfc3339(next_text)
            except ValueError:
                return moved
            self._due[scheduler] = (self._due[scheduler][0], at)
            self._inflight.discard(scheduler)
            moved = True
        return moved

    def purged_by(self, headers: Headers) -> str:
        """The schedule a one-off's firing retires once stored ("" if none)."""
        if _first(headers, NEXT) != PURGE:
            return ""
        scheduler = _first(headers, SCHEDULER)
        self.cancel(scheduler)
        return scheduler

    def cancel(self, subject: str) -> None:
        self._due.pop(subject, None)
        self._inflight.discard(subject)

    def clear_inflight(self) -> None:
        self._inflight.clear()

    def next_deadline(self) -> int | None:
        deadlines = [at for subject, (_, at) in self._due.items() if subject not in self._inflight]
        return min(deadlines) if deadlines else None

    def take_due(self, now: int) -> list[tuple[str, int, int]]:
        """(subject, seq, due) of schedules due by `now`, in seq order, marked in flight."""
        due = sorted(
            (seq, subject, at)
            for subject, (seq, at) in self._due.items()
            if at <= now and subject not in self._inflight
        )
        self._inflight.update(subject for _, subject, _ in due)
        return [(subject, seq, at) for seq, subject, at in due]


def _zone(headers: Headers) -> tzinfo | None:
    values = headers.get(TIME_ZONE)
    if values is None:
        return None
    name = values[0].strip()
    if not name:
        raise errors.schedules_time_zone_invalid()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise errors.schedules_time_zone_invalid() from None


def _cron_next(rule: cron.Cron, ts: int, zone: tzinfo | None) -> int:
    after = cron.in_zone(ts, zone or UTC)
    return int(rule.next_time(after).timestamp()) * _NS


def _in_zone_text(ts: int, zone: tzinfo | None) -> str:
    """RFC 3339 in the schedule's zone, as Go formats a time carrying its location (UTC
    is `Z`); firings fall on whole seconds except `@every` ones, which are UTC."""
    if zone is None:
        return rfc3339(ts)
    local = cron.in_zone(ts, zone)
    offset = local.utcoffset()
    if not offset:
        return rfc3339(ts)
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return local.strftime("%Y-%m-%dT%H:%M:%S") + f"{sign}{hours:02d}:{mins:02d}"


def _round_second(ts: int) -> int:
    return (ts + _NS // 2) // _NS * _NS


def _publishable(subject: str) -> bool:
    return is_valid_subject(subject) and "*" not in subject.split(".") and ">" not in subject


def _first(headers: Headers, name: str) -> str:
    values = headers.get(name)
    return values[0].strip() if values else ""
