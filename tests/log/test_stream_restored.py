"""A cluster restore's rows as stream entries (`stream_entries.Restored`): applied with the
backup's own seqs and timestamps, gaps and trailing deletes kept, a replay changing
nothing, and publishes held back while the restore runs."""

from __future__ import annotations

import asyncio
from functools import partial

from consensus.commits import settle
from log.segments.api import NewMsg
from log.streams.entries import Publish, Restored
from tests.log.test_stream import live, make, pub


def row(seq: int) -> Publish:
    return Publish(NewMsg(f"s.{seq}", None, b"%d" % seq, seq * 1000), seq)


async def propose(stream: object, entry: Restored) -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stream.propose_restored(entry, partial(settle, future, 0))  # type: ignore[attr-defined]
    await future


async def test_rows_keep_their_seqs_gaps_and_trailing_deletes() -> None:
    s = make()
    assert not s.restore_began
    await propose(s, Restored((), 0))
    assert s.restore_began
    await propose(s, Restored((row(3), row(4), row(6)), 6))
    await propose(s, Restored((row(8),), 10))  # 9 and 10 were deleted at the end
    assert live(s) == [3, 4, 6, 8]
    state = s.store.state()
    assert (state.first_seq, state.last_seq, state.msgs) == (3, 10, 4)
    msg = s.store.load(6)
    assert msg is not None and (msg.subject, msg.data, msg.ts) == ("s.6", b"6", 6000)
    await propose(s, Restored((row(4), row(6)), 6))  # a replay: nothing changes
    assert live(s) == [3, 4, 6, 8]


async def test_publishes_wait_for_the_restore_then_follow_it() -> None:
    s = make()
    s.restoring = True
    silent = asyncio.ensure_future(pub(s))
    await propose(s, Restored((row(1), row(2)), 5))
    assert not silent.done()
    silent.cancel()
    s.restored()
    s.restoring = False
    ack = await pub(s)
    assert ack["seq"] == 6
