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
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

TIMEOUT = 15.0
INTERVAL = 0.05

What = str | Callable[[], object]
"""What the check waits for; a callable is asked only on failure (a log, the last state)."""

Retry = type[Exception] | tuple[type[Exception], ...]


def poll(
    check: Callable[[], T | None],
    what: What,
    timeout: float = TIMEOUT,
    *,
    until: Callable[[T], object] | None = None,
    interval: float = INTERVAL,
    retry: Retry = (),
) -> T:
    """Call `check` until its result holds, and return that result.

    A result holds when `until(result)` is true, or without `until` when it is truthy
    itself; with `until`, a failure shows the last result. Exceptions of the `retry`
    types count as "not yet" (a failure shows the last one).
    """
    attempts = _Attempts(what, timeout, until)
    while True:
        try:
            result = check()
        except retry as exc:
            attempts.error = exc
        else:
            if attempts.held(result):
                return result  # type: ignore[return-value]
        attempts.expire()
        time.sleep(interval)


async def poll_async(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: What,
    timeout: float = TIMEOUT,
    *,
    until: Callable[[T], object] | None = None,
    interval: float = INTERVAL,
    retry: Retry = (),
) -> T:
    """`poll` in a loop: `check` may be a coroutine function or a plain one, and the
    loop runs between calls (the servers under test may share it)."""
    attempts = _Attempts(what, timeout, until)
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except retry as exc:
            attempts.error = exc
        else:
            if attempts.held(result):
                return result  # type: ignore[return-value]
        attempts.expire()
        await asyncio.sleep(interval)


class _Attempts:
    """One poll's deadline and what it saw last, for the sync and the async loop."""

    def __init__(self, what: What, timeout: float, until: Callable[[Any], object] | None):
        self.what, self.timeout, self.until = what, timeout, until
        self.deadline = time.monotonic() + timeout
        self.error: Exception | None = None
        self.seen: list[object] = []

    def held(self, result: object) -> bool:
        if self.until is None:
            return bool(result)
        self.seen[:] = [result]
        return bool(self.until(result))

    def expire(self) -> None:
        if time.monotonic() <= self.deadline:
            return
        said = self.what if isinstance(self.what, str) else str(self.what())
        message = f"not within {self.timeout:g} s: {said}"
        if self.seen:
            message += f" (last seen: {self.seen[0]!r})"
        if self.error is not None:
            message += f" (last error: {self.error!r})"
        raise AssertionError(message)
