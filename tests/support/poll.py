"""Wait for state that has no event to await: poll a check until a deadline.

Tests use this only for what they cannot subscribe to (another process's monitoring
page or log, a server's clock, a replica catching up). The failure names what did not
happen and after how long, so a timeout reads as a finding rather than a hang.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
    interval: float = INTERVAL,
    retry: Retry = (),
) -> T:
    """Call `check` until it returns something truthy and return that.

    Exceptions of the `retry` types count as "not yet" (the last one is reported).
    """
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = check()
        except retry as exc:
            last, result = exc, None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, last))
        time.sleep(interval)


async def poll_async(
    check: Callable[[], Awaitable[T | None] | T | None],
    what: What,
    timeout: float = TIMEOUT,
    *,
    interval: float = INTERVAL,
    retry: Retry = (),
) -> T:
    """Like `poll`, in a loop: `check` may be a coroutine function or a plain one, and
    the loop runs between calls (the servers under test may share it)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
        except retry as exc:
            last, result = exc, None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, timeout, last))
        await asyncio.sleep(interval)


def _timed_out(what: What, timeout: float, last: Exception | None) -> str:
    said = what if isinstance(what, str) else str(what())
    message = f"not within {timeout:g} s: {said}"
    return message if last is None else f"{message} (last error: {last!r})"
