"""Helpers for asserting on what nats-py clients received, without sleeping.

The barrier is the protocol's own ordering guarantee: once a publisher's flush
(PING/PONG) returns, the server has routed every earlier PUB; once a
subscriber's flush returns, every MSG routed to it before is in its pending
queue. So "exactly these messages and no more" is checkable at an instant.
"""

from __future__ import annotations

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from tests.support.poll import poll_async

FLUSH_TIMEOUT = 5.0


async def sync(nc: NATS) -> None:
    """Return once the server has processed everything ``nc`` sent so far (the suite's
    flush() pushes nats-py's queued commands ahead of its PING: tests/conftest.py)."""
    await nc.flush(FLUSH_TIMEOUT)


async def barrier(publisher: NATS, *subscribers: NATS) -> None:
    """Return once everything ``publisher`` sent has reached the subscribers' queues."""
    await sync(publisher)
    for nc in subscribers:
        await sync(nc)


async def drain_pending(sub: Subscription) -> list[Msg]:
    """Take every message already buffered for ``sub`` (call after barrier)."""
    msgs = []
    while sub.pending_msgs:
        msgs.append(await sub.next_msg(timeout=FLUSH_TIMEOUT))
    return msgs


async def received(publisher: NATS, subscriber: NATS, sub: Subscription) -> list[Msg]:
    """All messages ``sub`` (on ``subscriber``) got once ``publisher``'s output landed."""
    await barrier(publisher, subscriber)
    return await drain_pending(sub)


async def crossed(
    publisher: NATS, subject: str, sub: Subscription, payload: bytes = b"probe", wait: float = 0.2
) -> Msg | None:
    """Publish `payload` and return the message carrying it that `sub` gets within `wait`,
    or None. Interest crosses a route or a leaf link on its own time, with no event a
    client sees: a test polls this (tests.support.poll) until a message comes."""
    await publisher.publish(subject, payload)
    await sync(publisher)
    try:
        while True:
            msg = await sub.next_msg(timeout=wait)
            if msg.data == payload:
                return msg
    except nats.errors.TimeoutError:
        return None


def subjects(msgs: list[Msg]) -> list[str]:
    """Subjects in arrival order."""
    return [m.subject for m in msgs]


async def routed_interest(listener: NATS, far_url: str) -> None:
    """Returns once the server at `far_url` knows `listener`'s subscriptions: a probe
    subscribed after them is announced after them on the one route, so the far server
    routing a probe proves it has the rest. Without this the reference may emit an event
    before its route peer's interest arrives and drop it."""
    probe = await listener.subscribe("probe.routed")
    await listener.flush()
    far = await nats.connect(far_url)
    try:
        await poll_async(
            lambda: crossed(far, "probe.routed", probe, b"", 0.1),
            f"{far_url} routing to the listener's probe",
            10,
        )
    finally:
        await probe.unsubscribe()
        await far.close()


async def current_entries(watcher: KeyValue.KeyWatcher, count: int) -> list[KeyValue.Entry]:
    """A KV watcher's first `count` entries and the `None` that ends the current values.

    nats-py queues that `None` when its consumer-info reply says nothing is pending and
    its callback has not yet counted a delivery: on a fast server the marker can come
    before the entries it ends. Either order is the client's doing; once is required.
    """
    updates = [await watcher.updates(timeout=FLUSH_TIMEOUT) for _ in range(count + 1)]
    assert updates.count(None) == 1, updates
    return [u for u in updates if u is not None]


async def current_values(watcher: KeyValue.KeyWatcher) -> list[KeyValue.Entry]:
    """A KV watcher's entries up to the one its server says nothing is pending after,
    ignoring where nats-py queued its `None` (see `current_entries`); then stop it.

    nats-py's `kv.keys()` and `kv.history()` end at the first `None`: when it comes
    before the entries they find nothing (NoKeysError), which the reference's fast
    consumer-info reply caused about once in 400 calls under load. A watcher on a bucket
    with no current value gets no entry, so only call this where one is expected.
    """
    entries: list[KeyValue.Entry] = []
    while not entries or entries[-1].delta:
        update = await watcher.updates(timeout=FLUSH_TIMEOUT)
        if update is not None:
            entries.append(update)
    await watcher.stop()
    return entries


async def kv_keys(kv: KeyValue) -> list[str]:
    """`kv.keys()` without its race: the live keys, in the order the server sends them."""
    entries = await current_values(await kv.watchall(meta_only=True))
    return [e.key for e in entries if e.operation is None]


async def kv_history(kv: KeyValue, key: str) -> list[KeyValue.Entry]:
    """`kv.history(key)` without its race: every revision the bucket keeps of `key`."""
    return await current_values(await kv.watch(key, include_history=True))
