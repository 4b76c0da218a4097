"""One scenario of response permissions, shared by the JWT (`resp`) and config-file
(`allow_responses`) tests: a responder allowed two answers within one second, and no
other publish."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NATS

from tests.support.raw import Outcome, RawClient


async def two_answers_within_a_second(requester: NATS, client: RawClient) -> None:
    """`client` (logged in, subscribe allowed on `req.>`) may answer a request it received
    twice, only within 1 s, and may publish nothing else."""
    answers = await requester.subscribe("back.>")
    assert await client.outcome(b"SUB req.> 1\r\n") == Outcome((), closed=False)
    await requester.publish("req.1", b"", reply="back.1")
    assert (await client.read_op())[0].startswith(b"MSG req.1 1 back.1")
    script = b"PUB back.1 1\r\na\r\n" * 3 + b"PUB other 1\r\nd\r\n"
    assert await client.outcome(script) == Outcome(
        (
            b"-ERR 'Permissions Violation for Publish to \"back.1\"'",
            b"-ERR 'Permissions Violation for Publish to \"other\"'",
        ),
        closed=False,
    )
    assert [(await answers.next_msg(2)).data for _ in range(2)] == [b"a", b"a"]
    await requester.publish("req.2", b"", reply="back.2")
    assert (await client.read_op())[0].startswith(b"MSG req.2 1 back.2")
    await asyncio.sleep(1.2)  # past the ttl
    assert await client.outcome(b"PUB back.2 1\r\na\r\n") == Outcome(
        (b"-ERR 'Permissions Violation for Publish to \"back.2\"'",), closed=False
    )
