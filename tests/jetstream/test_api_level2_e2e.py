"""JetStream API level 2 through nats-py against both servers, with the same assertions:
atomic batch publish, counters, message schedules, persist mode, and the level itself.

Every expectation was observed from the reference nats-server 2.15; the kill -9
tests restart a real process and hold both servers to "the whole batch or none".
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from typing import Any

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.jetstream.test_sources_e2e import stream_holding
from tests.jetstream.test_streams_e2e import api
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess


async def send(nc: NATS, subject: str, data: bytes = b"x", **headers: str) -> Any:
    """Publish as a request; the reply decoded, None for an empty one (a staged message)."""
    hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
    msg = await nc.request(subject, data, timeout=5, headers=hdrs or None)
    return json.loads(msg.data) if msg.data else None


def error(reply: Any) -> tuple[int, str]:
    return reply["error"]["err_code"], reply["error"]["description"]


async def stored(nc: NATS, stream: str, seq: int) -> tuple[str, str, bytes] | None:
    """(subject, header block, data) of one stored message, None if absent."""
    got = await api(nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq})
    if "error" in got:
        return None
    msg = got["message"]
    hdrs = base64.b64decode(msg.get("hdrs", "")).decode()
    return msg["subject"], hdrs, base64.b64decode(msg.get("data", ""))


async def test_the_api_level_and_the_level_streams_require(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    assert (await api(nc, "$JS.API.INFO"))["api"]["level"] == 5  # both: 2.15's
    for extra in (
        {"allow_atomic": True},
        {"allow_msg_counter": True},
        {"allow_msg_schedules": True},
        {"persist_mode": "async"},
    ):
        created = await api(nc, "$JS.API.STREAM.CREATE.L", {"name": "L", **extra})
        config = created["config"]
        assert config["metadata"]["_nats.req.level"] == "2", extra
        assert all(config[k] == v for k, v in extra.items()), config
        await api(nc, "$JS.API.STREAM.DELETE.L")
    refused = await api(
        nc, "$JS.API.STREAM.CREATE.L", {"name": "L", "allow_msg_counter": True, "discard": "new"}
    )
    assert error(refused) == (10052, "counter stream cannot use discard new")
    level5 = await nc.request("$JS.API.INFO", b"", headers={"Nats-Required-Api-Level": "5"})
    assert json.loads(level5.data)["api"]["level"] == 5
    level6 = await api(nc, "$JS.API.INFO", **{"Nats-Required-Api-Level": "6"})
    assert error(level6) == (10185, "JetStream minimum api level required")


async def test_atomic_batches_are_stored_whole_or_refused_whole(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await api(
        nc, "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b.>"], "allow_atomic": True}
    )
    first = await send(
        nc, "b.1", b"one", Nats_Batch_Id="x", Nats_Batch_Sequence="1", Nats_Required_Api_Level="2"
    )
    assert first is None  # staged; the level header is checked, then dropped
    ack = await send(
        nc, "b.2", b"two", Nats_Batch_Id="x", Nats_Batch_Sequence="2", Nats_Batch_Commit="1"
    )
    assert ack == {"stream": "B", "seq": 2, "batch": "x", "count": 2}
    assert await stored(nc, "B", 1) == (
        "b.1",
        "NATS/1.0\r\nNats-Batch-Id: x\r\nNats-Batch-Sequence: 1\r\n\r\n",
        b"one",
    )
    # a gap drops the batch; what was staged is never stored
    await send(nc, "b.1", Nats_Batch_Id="g", Nats_Batch_Sequence="1")
    gap = await send(nc, "b.1", Nats_Batch_Id="g", Nats_Batch_Sequence="3", Nats_Batch_Commit="1")
    assert error(gap) == (10176, "atomic publish batch is incomplete")
    # one refused message refuses the batch: nothing of it is stored
    await send(nc, "b.1", Nats_Batch_Id="d", Nats_Batch_Sequence="1", Nats_Msg_Id="m")
    dup = await send(
        nc,
        "b.1",
        Nats_Batch_Id="d",
        Nats_Batch_Sequence="2",
        Nats_Msg_Id="m",
        Nats_Batch_Commit="1",
    )
    assert error(dup) == (10201, "atomic publish batch contains duplicate message id")
    # an end-of-batch marker commits what came before it
    await send(nc, "b.e", b"last", Nats_Batch_Id="e", Nats_Batch_Sequence="1")
    eob = await send(
        nc, "b.x", b"", Nats_Batch_Id="e", Nats_Batch_Sequence="2", Nats_Batch_Commit="eob"
    )
    assert eob == {"stream": "B", "seq": 3, "batch": "e", "count": 1}
    got = await stored(nc, "B", 3)
    assert got is not None and got[1].endswith("Nats-Batch-Commit: 1\r\n\r\n")
    info = await api(nc, "$JS.API.STREAM.INFO.B")
    assert (info["state"]["messages"], info["state"]["last_seq"]) == (3, 3)


async def test_atomic_batch_refusals_match_the_reference(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await api(
        nc, "$JS.API.STREAM.CREATE.B", {"name": "B", "subjects": ["b.>"], "allow_atomic": True}
    )
    await api(nc, "$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]})
    small = {"name": "T", "subjects": ["t.>"], "allow_atomic": True, "max_msg_size": 16}
    await api(nc, "$JS.API.STREAM.CREATE.T", small)
    cases: list[tuple[str, dict[str, str], tuple[int, str]]] = [
        (
            "t.1",  # the header block alone is over max_msg_size
            {"Nats_Batch_Id": "m", "Nats_Batch_Sequence": "1", "Nats_Batch_Commit": "1"},
            (10054, "message size exceeds maximum allowed"),
        ),
        (
            "n.1",
            {"Nats_Batch_Id": "a", "Nats_Batch_Sequence": "1"},
            (10174, "atomic publish is disabled"),
        ),
        ("b.1", {"Nats_Batch_Id": "a"}, (10175, "atomic publish sequence is missing")),
        (
            "b.1",
            {"Nats_Batch_Id": "a" * 65, "Nats_Batch_Sequence": "1"},
            (10179, "atomic publish batch ID is invalid"),
        ),
        (
            "b.1",
            {"Nats_Batch_Id": "u", "Nats_Batch_Sequence": "2"},
            (10176, "atomic publish batch is incomplete"),
        ),
        (
            "b.1",
            {"Nats_Batch_Id": "u", "Nats_Batch_Sequence": "1001"},
            (10199, "atomic publish batch is too large: 1000"),
        ),
        (
            "b.1",
            {"Nats_Batch_Id": "c", "Nats_Batch_Sequence": "1", "Nats_Batch_Commit": "yes"},
            (10200, "atomic publish batch commit is invalid"),
        ),
        (
            "b.1",
            {"Nats_Batch_Id": "r", "Nats_Batch_Sequence": "1", "Nats_Required_Api_Level": "99"},
            (10185, "JetStream minimum api level required"),
        ),
        (
            "b.1",
            {
                "Nats_Batch_Id": "l",
                "Nats_Batch_Sequence": "1",
                "Nats_Batch_Commit": "1",
                "Nats_Expected_Last_Msg_Id": "z",
            },
            (10177, "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id"),
        ),
        (
            "b.1",
            {
                "Nats_Batch_Id": "s",
                "Nats_Batch_Sequence": "1",
                "Nats_Batch_Commit": "1",
                "Nats_Expected_Last_Sequence": "9",
            },
            (10071, "wrong last sequence: 0"),
        ),
    ]
    for subject, headers, expected in cases:
        assert error(await send(nc, subject, **headers)) == expected, headers
    assert (await api(nc, "$JS.API.STREAM.INFO.B"))["state"]["messages"] == 0


async def test_a_batch_is_all_or_nothing_across_a_kill(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """Staged but uncommitted: gone after a kill -9. Killed at several moments after the
    commit was sent (a 16 MiB commit takes the server about 0.1 s): after each restart
    the stream holds all of the batch or none of it, never a prefix."""
    nc = await connect(js_server)
    await api(
        nc, "$JS.API.STREAM.CREATE.K", {"name": "K", "subjects": ["k.>"], "allow_atomic": True}
    )
    for seq in (1, 2, 3):
        await send(nc, "k.staged", Nats_Batch_Id="open", Nats_Batch_Sequence=str(seq))
    size, body = 1000, bytes(range(256)) * 64  # 16 KiB a message
    held = 0
    for delay in (0.0, 0.05, 0.1, 0.2):
        batch_id = f"big-{delay}"
        for seq in range(1, size + 1):
            hdrs = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq)}
            if seq == size:
                hdrs["Nats-Batch-Commit"] = "1"
            await nc.publish("k.big", body, headers=hdrs)
        await nc.flush()
        await asyncio.sleep(delay)
        js_server.send_signal(signal.SIGKILL)
        await js_server.wait_exit_async()
        await nc.close()
        await js_server.restart_async()
        nc = await connect(js_server)
        state = (await api(nc, "$JS.API.STREAM.INFO.K", {"subjects_filter": ">"}))["state"]
        assert state["messages"] in (held, held + size), (delay, state)
        assert "k.staged" not in state.get("subjects", {})
        held = state["messages"]
    # the stream takes new batches after the restarts
    await send(nc, "k.after", Nats_Batch_Id="new", Nats_Batch_Sequence="1")
    ack = await send(
        nc, "k.after", Nats_Batch_Id="new", Nats_Batch_Sequence="2", Nats_Batch_Commit="1"
    )
    assert ack["count"] == 2 and ack["seq"] == state["last_seq"] + 2


async def test_counters_keep_their_total_in_the_last_message(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await api(
        nc, "$JS.API.STREAM.CREATE.C", {"name": "C", "subjects": ["c.>"], "allow_msg_counter": True}
    )
    acks = [await send(nc, "c.a", b"", Nats_Incr=incr) for incr in ("5", "-2", "+10")]
    assert [a["val"] for a in acks] == ["5", "3", "13"]
    big = await send(nc, "c.big", b"", Nats_Incr="123456789012345678901234567890")
    assert big == {"stream": "C", "seq": 4, "val": "123456789012345678901234567890"}
    assert await stored(nc, "C", 3) == (
        "c.a",
        "NATS/1.0\r\nNats-Incr: +10\r\n\r\n",
        b'{"val":"13"}',
    )
    cases: list[tuple[str, bytes, dict[str, str], tuple[int, str]]] = [
        ("c.a", b"", {"Nats_Incr": "1.5"}, (10171, "message counter increment is invalid")),
        ("c.a", b"x", {"Nats_Incr": "1"}, (10170, "message counter has payload")),
        ("c.a", b"", {}, (10169, "message counter increment is missing")),
        (
            "c.a",
            b"",
            {"Nats_Incr": "1", "Nats_Rollup": "sub"},
            (10171, "message counter increment is invalid"),
        ),
    ]
    for subject, data, headers, expected in cases:
        assert error(await send(nc, subject, data, **headers)) == expected, headers
    await api(nc, "$JS.API.STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
    disabled = await send(nc, "p.a", b"", Nats_Incr="1")
    assert error(disabled) == (10168, "message counters is disabled")
    first = await send(nc, "c.d", b"", Nats_Incr="1", Nats_Msg_Id="k")
    again = await send(nc, "c.d", b"", Nats_Incr="1", Nats_Msg_Id="k")
    assert (first["val"], again) == ("1", {"stream": "C", "seq": first["seq"], "duplicate": True})


async def test_a_schedule_publishes_on_its_target_and_a_one_off_retires(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    await api(
        nc,
        "$JS.API.STREAM.CREATE.S",
        {"name": "S", "subjects": ["s.>"], "allow_msg_schedules": True, "allow_msg_ttl": True},
    )
    ack = await send(
        nc,
        "s.once",
        b"hello",
        Nats_Schedule="@at 2020-01-01T00:00:00Z",  # due already: fires at once
        Nats_Schedule_Target="s.target",
        Nats_Schedule_TTL="5m",
        X_Custom="kept",
    )
    assert ack == {"stream": "S", "seq": 1}
    await poll_async(  # the firing is the server's own publish
        lambda: api(nc, "$JS.API.STREAM.INFO.S", {"subjects_filter": ">"}),
        "the schedule to fire",
        until=lambda info: info["state"].get("subjects") == {"s.target": 1},
    )
    assert await stored(nc, "S", 2) == (
        "s.target",
        "NATS/1.0\r\nX-Custom: kept\r\nNats-Scheduler: s.once\r\n"
        "Nats-Schedule-Next: purge\r\nNats-TTL: 5m\r\n\r\n",
        b"hello",
    )
    cases: list[tuple[dict[str, str], tuple[int, str]]] = [
        (
            {"Nats_Schedule": "bogus", "Nats_Schedule_Target": "s.t"},
            (10189, "message schedules pattern is invalid"),
        ),
        (
            {"Nats_Schedule": "@every 1s", "Nats_Schedule_Target": "elsewhere"},
            (10190, "message schedules target is invalid"),
        ),
        (
            {"Nats_Schedule": "@every 1s", "Nats_Schedule_Target": "s.t", "Nats_Schedule_TTL": "x"},
            (10191, "message schedules invalid per-message TTL"),
        ),
        (
            {"Nats_Schedule": "@every 1s", "Nats_Schedule_Target": "s.t", "Nats_Rollup": "all"},
            (10192, "message schedules invalid rollup"),
        ),
        (
            {
                "Nats_Schedule": "0 0 * * * *",
                "Nats_Schedule_Target": "s.t",
                "Nats_Schedule_Time_Zone": "No/Where",
            },
            (10223, "message schedules time zone is invalid"),
        ),
        ({"Nats_Scheduler": "s.once"}, (10212, "message schedules invalid scheduler")),
    ]
    for headers, expected in cases:
        assert error(await send(nc, "s.sched", **headers)) == expected, headers
    await api(nc, "$JS.API.STREAM.CREATE.N", {"name": "N", "subjects": ["n.>"]})
    off = await send(nc, "n.s", Nats_Schedule="@every 1s", Nats_Schedule_Target="n.t")
    assert error(off) == (10188, "message schedules is disabled")


async def test_a_pull_request_nobody_listens_to_takes_no_message(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    """The reply subject lost its subscriber (in the same flush as the publishes, too):
    the messages stay pending for the next request instead of waiting out ack_wait."""
    nc = await connect(js_server)
    js = nc.jetstream()
    await js.add_stream(name="DF", subjects=["df.>"])
    await js.add_consumer("DF", durable_name="C", ack_policy="explicit")
    sub = await nc.subscribe("deaf.inbox")
    request = json.dumps({"batch": 5, "expires": 30_000_000_000}).encode()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.DF.C", request, reply="deaf.inbox")
    await nc.flush()
    await sub.unsubscribe()
    for _ in range(3):
        await nc.publish("df.a", b"m")
    await nc.flush()
    info = await poll_async(  # the stream takes them asynchronously
        lambda: js.consumer_info("DF", "C"),
        "the consumer to count all three",
        until=lambda i: i.num_pending + i.num_ack_pending == 3,
    )
    assert (info.num_pending, info.num_ack_pending, info.delivered.consumer_seq) == (3, 0, 0)
    fetched = await js.pull_subscribe_bind("C", stream="DF")
    assert len(await fetched.fetch(3, timeout=5)) == 3


async def test_a_counter_stream_sums_the_counters_it_sources(
    js_server: ServerProcess,
    connect: Connect,
) -> None:
    nc = await connect(js_server)
    for name in ("CA", "CB"):
        cfg = {"name": name, "subjects": [f"{name.lower()}.>"], "allow_msg_counter": True}
        await api(nc, f"$JS.API.STREAM.CREATE.{name}", cfg)
    sources = [
        {"name": name, "subject_transforms": [{"src": f"{name.lower()}.>", "dest": "agg.>"}]}
        for name in ("CA", "CB")
    ]
    agg = {"name": "AGG", "subjects": ["agg.>"], "allow_msg_counter": True, "sources": sources}
    assert "error" not in await api(nc, "$JS.API.STREAM.CREATE.AGG", agg)
    for subject, incr in (("ca.x", "5"), ("cb.x", "7"), ("ca.x", "-1")):
        await send(nc, subject, b"", Nats_Incr=incr)
    await stream_holding(nc, "AGG", 3)  # sources copy asynchronously
    got = await stored(nc, "AGG", 3)
    assert got is not None and got[0] == "agg.x" and got[2] == b'{"val":"11"}'
    lines = got[1].split("\r\n")  # the two sources' copies interleave in either order
    assert "Nats-Incr: -1" in lines or "Nats-Incr: 7" in lines
    assert 'Nats-Counter-Sources: {"CA":{"ca.x":"4"},"CB":{"cb.x":"7"}}' in lines
