"""Wait for state that has no event to await: poll a check until a deadline.

Tests use this only for what they cannot subscribe to (another process's monitoring
page or log, a server's clock, a replica catching up). The failure names what did not
happen and after how long, with the last thing seen, so a timeout reads as a finding
rather than a hang.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict, TypeVar, Unpack

T = TypeVar("T")

TIMEOUT = 15.0
INTERVAL = 0.05

What = str | Callable[[], object]
"""What the check waits for; a callable is asked only on failure (a log, the last state)."""

Retry = type[Exception] | tuple[type[Exception], ...]


class How(TypedDict, total=False):
    """How to poll, beyond what and how long.

    until: the result holds when `until(result)` is true (a failure then shows the last
        result); without it, when the result is truthy itself.
    interval: seconds between calls (`INTERVAL`).
    retry: exceptions of these types count as "not yet" (a failure shows the last one).
    """

    until: Callable[[Any], object]
    interval: float
    retry: Retry


def poll(
    check: Callable[[], T | None], what: What, timeout: float = TIMEOUT, **how: Unpack[How]
) -> T:
    """Call `check` until its result holds (see `How`), and return that result."""
    attempts = _Attempts(what, timeout, how)
    while True:
        with attempts.trying():
            if attempts.held(check()):
                return attempts.result
        time.sleep(attempts.pause())


async def poll_async(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: What,
    timeout: float = TIMEOUT,
    **how: Unpack[How],
) -> T:
    """`poll` in a loop: `check` may be a coroutine function or a plain one, and the
    loop runs between calls (the servers under test may share it)."""
    attempts = _Attempts(what, timeout, how)
    while True:
        with attempts.trying():
            result = check()
            if attempts.held(await result if inspect.isawaitable(result) else result):
                return attempts.result
        await asyncio.sleep(attempts.pause())


class _Attempts:
    """One poll's deadline and what it saw last, for the sync and the async loop."""

    def __init__(self, what: What, timeout: float, how: How) -> None:
        self.what, self.timeout = what, timeout
        self.until = how.get("until")
        self.interval = how.get("interval", INTERVAL)
        self.retry = how.get("retry", ())
        self.deadline = time.monotonic() + timeout
        self.result: Any = None
        self.error: Exception | None = None
        self.seen = False

    def held(self, result: object) -> bool:
        self.result = result
        if self.until is None:
            return bool(result)
        self.seen = True
        return bool(self.until(result))

    @contextmanager
    def trying(self) -> Iterator[None]:
        """Around one call of the check: an exception of a `retry` type is kept, not raised."""
        try:
            yield
        except self.retry as exc:
            self.error = exc

    def pause(self) -> float:
        """The wait before the next call; past the deadline, the failure instead."""
        if time.monotonic() <= self.deadline:
            return self.interval
        said = self.what if isinstance(self.what, str) else str(self.what())
        message = f"not within {self.timeout:g} s: {said}"
        if self.seen:
            message += f" (last seen: {self.result!r})"
        if self.error is not None:
            message += f" (last error: {self.error!r})"
        raise AssertionError(message)
