"""A message larger than the far end's `max_payload`, sent across a leafnode link either
way: as the reference does, the sending end forwards it (a link does not hold to the
other end's limit), the receiving end refuses it with `-ERR 'Maximum Payload
Violation'` and closes the link, and the leaf dials again. The publisher and the
other clients keep their connections; the link carries messages again afterwards."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from tests.leafnode.conftest import LINK_TIMEOUT, hub_config, knows, leaf_config, linked
from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server

LIMIT = 1024
PAIRS = [
    pytest.param(("nats-server", "nats-server"), id="ref-hub/ref-leaf", marks=pytest.mark.soak),
    pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf"),
    pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
    pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf", marks=pytest.mark.soak),
]


@pytest.mark.parametrize("kinds", PAIRS)
@pytest.mark.parametrize("toward", ["hub", "leaf"])
async def test_an_oversized_message_closes_the_link_and_it_comes_back(
    tmp_path: Path, kinds: tuple[str, str], toward: str
) -> None:
    """`toward` is the end with the small `max_payload`, the one the message goes to."""
    hub_kind, leaf_kind = kinds
    port = free_port()
    small = f"max_payload: {LIMIT}\n"
    hub = start_server(
        hub_kind,
        "-m",
        "-1",
        config=hub_config(port, small if toward == "hub" else ""),
        tmp_path=tmp_path,
        name="hub",
    )
    leaf = None
    try:
        leaf = start_server(
            leaf_kind,
            "-m",
            "-1",
            config=leaf_config(port, extra=small if toward == "leaf" else ""),
            tmp_path=tmp_path,
            name="leaf",
        )
        await asyncio.to_thread(poll, lambda: linked(hub) and linked(leaf), "link", LINK_TIMEOUT)
        receiver, sender = (hub, leaf) if toward == "hub" else (leaf, hub)
        await oversized_across(receiver, sender, toward)
    finally:
        if leaf is not None:
            leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


async def oversized_across(receiver: ServerProcess, sender: ServerProcess, toward: str) -> None:
    """`sender` sends `receiver` (the `toward` end) one message twice its `max_payload`."""
    receiver_name, sender_name = (toward, "leaf" if toward == "hub" else "hub")
    errors: list[Exception] = []

    async def note(exc: Exception) -> None:
        errors.append(exc)

    far = await nats.connect(receiver.url, error_cb=note, allow_reconnect=False)
    near = await nats.connect(sender.url, error_cb=note, allow_reconnect=False)
    across = await far.subscribe("big.>")
    local = await near.subscribe("local")
    await far.flush()
    await knows(sender, "big.>")
    await near.publish("big.1", b"x" * (2 * LIMIT))
    await near.flush()
    await receiver.wait_for_log_async(
        f"maximum payload exceeded: {2 * LIMIT} vs {LIMIT}", LINK_TIMEOUT
    )
    closed = f"Leafnode connection closed: Maximum Message Payload Exceeded - Remote: {sender_name}"
    await receiver.wait_for_log_async(closed, LINK_TIMEOUT)
    await sender.wait_for_log_async("Leafnode Error 'Maximum Payload Violation'", LINK_TIMEOUT)
    hung_up = f"Leafnode connection closed: (Client Closed|Read Error) - Remote: {receiver_name}"
    await sender.wait_for_log_async(hung_up, LINK_TIMEOUT)  # the receiver hung up, not it
    await near.publish("local", b"meanwhile")  # the sending side carries on
    assert (await local.next_msg(5)).data == b"meanwhile"
    await asyncio.to_thread(
        poll, lambda: linked(receiver) and linked(sender), "the link again", LINK_TIMEOUT
    )
    await knows(sender, "big.>")
    await near.publish("big.2", b"fits")
    assert (await across.next_msg(5)).data == b"fits"  # the oversized one never arrived
    assert far.is_connected and near.is_connected
    assert errors == []
    await far.close()
    await near.close()
