"""`-V` traces the protocol: tools and people grep these lines on both servers alike."""

from __future__ import annotations

from tests.conftest import Connect, MakeServer
from tests.support.poll import poll_async


async def test_trace_logs_each_control_line(make_server: MakeServer, connect: Connect) -> None:
    server = make_server("-V")
    nc = await connect(server)
    sub = await nc.subscribe("trace.x")
    await nc.publish("trace.x", b"hi")
    await sub.next_msg(timeout=5)
    # Stable parts only: the reference echoes the client's own spacing inside the brackets.
    wanted = (
        '"v2.16.0:python3" - <<- [SUB trace.x',
        '"v2.16.0:python3" - <<- [PUB trace.x',
        '<<- MSG_PAYLOAD: ["hi"]',
        "->> [MSG trace.x 1 2]",
        '->> MSG_PAYLOAD: ["hi"]',
    )
    await poll_async(  # a log file written by another process
        lambda: all(line in server.log() for line in wanted), server.log, 5
    )
    assert "[TRC]" in server.log()


async def test_no_trace_without_the_flag(make_server: MakeServer, connect: Connect) -> None:
    server = make_server()
    nc = await connect(server)
    await nc.publish("quiet", b"x")
    await nc.flush()
    assert "[TRC]" not in server.log()
