"""A publish whose subject is not UTF-8, into a stream that captures it.

jetlake only, on purpose: segments and the lake keep subjects as text, so such a
publish is refused with a JetStream error; the reference stores any bytes. What
matters is that the publisher gets an answer and nothing else is disturbed.
"""

from __future__ import annotations

import json

from tests.conftest import Connect
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess


async def test_a_subject_that_is_not_utf8_is_refused_and_harms_nothing(
    jetlake_js: ServerProcess, connect: Connect
) -> None:
    nc = await connect(jetlake_js)
    js = nc.jetstream()
    await js.add_stream(name="U", subjects=["u.>"])
    async with await RawClient.connect(jetlake_js.host, jetlake_js.port) as raw:
        await raw.handshake()
        await raw.send(b"SUB _r 1\r\nPUB u.\xff\xfe _r 2\r\nhi\r\nPING\r\n")
        line, body = await raw.read_op()
        assert line.startswith(b"MSG _r 1 ")
        assert body is not None
        assert json.loads(body) == {
            "stream": "U",
            "seq": 0,
            "error": {"code": 503, "err_code": 10077, "description": "subject is not valid UTF-8"},
        }
        assert await raw.read_line() == b"PONG"  # the connection goes on
    assert (await js.publish("u.ok", b"fine")).seq == 1
    assert (await js.stream_info("U")).state.messages == 1
