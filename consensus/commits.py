"""How a proposer hears that its entries committed: one plain callback per proposal.

Shared by the group of one (`log.replication`) and the Raft driver, so both
tell their proposers the same way. A callback, not a Future: futures cost a
loop callback each, per published message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# Called once the proposal's batch committed (None) or failed (the error).
OnCommit = Callable[[BaseException | None], None]


def notify(waiters: list[OnCommit], error: BaseException | None) -> None:
    """Tell every proposer; one failing callback must not cost the others their acks."""
    for on_commit in waiters:
        try:
            on_commit(error)
        except Exception as exc:
            asyncio.get_running_loop().call_exception_handler(
                {"message": "commit callback failed", "exception": exc}
            )


def refuse(error: BaseException, *callbacks: OnCommit | None) -> None:
    """A proposal turned away before it was queued: each of its callbacks given (`early`
    before `on_commit`) hears why."""
    notify([cb for cb in callbacks if cb is not None], error)


def settle(future: asyncio.Future[int], index: int, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(index)
    else:
        future.set_exception(error)
