"""A pull batch as a client's pending limits see it, and a pull with no one to receive it.

The reference writes a fetch's messages in one burst, so a nats-py subscription
whose pending limit is below the batch drops the excess (nats.py's own
`test_pull_subscribe_limits` counts on it); a request from a subscription already
gone leaves the consumer's pending count as it was.
"""

from __future__ import annotations

import nats.errors
import pytest

from tests.conftest import Connect
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess


async def test_a_fetch_arrives_whole_and_a_pull_without_interest_takes_nothing(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="LIMITS", subjects=["a3"])
    sub = await js.pull_subscribe("a3", "auto", pending_msgs_limit=50, pending_bytes_limit=-1)
    for _ in range(100):
        await js.publish("a3", b"test")
    msgs = await sub.fetch(100, timeout=3)  # waits it out: fewer than 100 come
    # In one burst the client takes its limit (give or take a message its fetch takes
    # meanwhile) and drops the rest as a slow consumer; sent in pieces of 32, it took
    # 60 to 100 of them.
    assert 50 <= len(msgs) <= 53
    for msg in msgs:
        await msg.ack()

    other = await js.pull_subscribe("a3", "two", pending_msgs_limit=-1, pending_bytes_limit=-1)
    assert len(await other.fetch(100, timeout=5)) == 100

    # A fetch whose first (no-wait) pull is answered in pieces leaves nats-py's second
    # pull waiting until it expires; the last message must not go to it.
    async def no_pull_waits() -> bool:
        return not (await other.consumer_info()).num_waiting

    await poll_async(no_pull_waits, "nats-py's second pull expired", 10)
    await js.publish("a3", b"last message")
    assert (await other.consumer_info()).num_pending == 1
    await other.unsubscribe()
    with pytest.raises(nats.errors.TimeoutError):
        await other.fetch(1, timeout=1)
    assert (await other.consumer_info()).num_pending == 1
