"""Direct get ($JS.API.DIRECT.GET.<stream>) against both servers: the same replies, in order.

Every expectation below was observed from the reference nats-server 2.15.1:
status lines, the headers added to each message, the order of a multi_last
answer and what its end-of-batch status carries. Timestamps are the only
values left out of comparisons; tests that need one take it from a reply.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from ingest.server.jetstream.direct_multi import last_seqs
from log.segments.api import NewMsg
from log.segments.memstore import MemoryStore
from tests.conftest import Connect
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess

Reply = tuple[dict[str, str], bytes]

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
FUTURE = "2099-01-01T00:00:00Z"
PAST = "2000-01-01T00:00:00Z"
# (subject, payload) in publish order: a.1 and a.2 get a second revision, a.3 has headers.
SEED = [("a.1", b"1"), ("a.2", b"2"), ("b.1", b"3"), ("a.1", b"4")]
SEED += [("c", b"5"), ("b.2", b"6"), ("a.2", b"7"), ("a.3", b"8")]


async def create(nc: NATS, name: str, subjects: list[str], storage: str = "file") -> None:
    config = {"name": name, "subjects": subjects, "allow_direct": True, "storage": storage}
    reply = await nc.request(f"$JS.API.STREAM.CREATE.{name}", json.dumps(config).encode(), 5)
    assert "error" not in json.loads(reply.data), reply.data


async def seeded(js_server: ServerProcess, connect: Connect) -> NATS:
    """Stream S (a.>, b.>, c) holding SEED as seqs 1-8; a.3 carries the header X: y."""
    nc = await connect(js_server)
    await create(nc, "S", ["a.>", "b.>", "c"])
    js = nc.jetstream(timeout=5)
    for subject, data in SEED:
        await js.publish(subject, data, headers={"X": "y"} if subject == "a.3" else None)
    return nc


async def direct_get(nc: NATS, body: Any, target: str = "S") -> list[Reply]:
    """Every reply to one request: one message, or a batch up to its status (EOB, 404, 413).

    Headers are as nats-py parses them, the status line as Status and Description.
    """
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    batched = isinstance(body, dict) and ("batch" in body or "multi_last" in body)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.DIRECT.GET.{target}", data, reply=inbox)
    out: list[Reply] = []
    while True:
        msg = await sub.next_msg(timeout=5)
        headers = {str(getattr(k, "value", k)): v for k, v in (msg.headers or {}).items()}
        out.append((headers, msg.data))
        if "Status" in headers or not batched:
            break
    await sub.unsubscribe()
    return out


def timeless(replies: list[Reply]) -> list[Reply]:
    """Replies without Nats-Time-Stamp, after checking it is an RFC 3339 UTC time."""
    out = []
    for headers, data in replies:
        stamp = headers.pop("Nats-Time-Stamp", None)
        assert stamp is None or STAMP.fullmatch(stamp), stamp
        out.append((headers, data))
    return out


def stamp_of(replies: list[Reply]) -> str:
    return replies[0][0]["Nats-Time-Stamp"]


def msg(
    subject: str, seq: int, data: bytes, *pending: int, stream: str = "S", **extra: str
) -> Reply:
    """A message reply; `pending` is (Nats-Num-Pending, Nats-Last-Sequence) in batches."""
    headers = {**extra, "Nats-Stream": stream, "Nats-Subject": subject, "Nats-Sequence": str(seq)}
    if pending:
        headers["Nats-Num-Pending"], headers["Nats-Last-Sequence"] = map(str, pending)
    return headers, data


def eob(pending: int, last: int, up_to: int | None = None) -> Reply:
    headers = {"Status": "204", "Description": "EOB", "Nats-Num-Pending": str(pending)}
    headers["Nats-Last-Sequence"] = str(last)
    if up_to is not None:
        headers["Nats-UpTo-Sequence"] = str(up_to)
    return headers, b""


def status(code: int, description: str) -> Reply:
    return {"Status": str(code), "Description": description}, b""


A_LASTS = [msg("a.1", 4, b"4", 2, 0), msg("a.2", 7, b"7", 1, 4), msg("a.3", 8, b"8", 0, 7, X="y")]


# -- validation ---------------------------------------------------------------------------

REFUSALS: list[tuple[Any, str]] = [
    (b"", "Empty Request"),
    (b"{bad", "Malformed Request"),
    (b"[]", "Malformed Request"),
    (b"null", "Empty Request"),
    ({}, "Empty Request"),
    ({"seq": 0, "batch": 3, "no_hdr": True}, "Empty Request"),
    ({"multi_last": []}, "Empty Request"),
    ({"up_to_seq": 3}, "Empty Request"),
    ({"seq": "1"}, "Malformed Request"),
    ({"seq": -1}, "Malformed Request"),
    ({"seq": 1.0}, "Malformed Request"),
    ({"seq": 18446744073709551616}, "Malformed Request"),
    ({"seq": 1, "no_hdr": "yes"}, "Malformed Request"),
    ({"multi_last": "a.1"}, "Malformed Request"),
    ({"multi_last": ["a.1", 5]}, "Malformed Request"),
    ({"start_time": "bogus"}, "Malformed Request"),
    ({"start_time": "2000-01-01T00:00:00"}, "Malformed Request"),
    ({"start_time": "2000-02-30T00:00:00Z"}, "Malformed Request"),
    ({"start_time": "2000-01-01T00:00:00+0100"}, "Malformed Request"),
    ({"start_time": 5}, "Malformed Request"),
    ({"seq": 1, "last_by_subj": "a.1"}, "Bad Request"),
    ({"seq": 1, "start_time": PAST}, "Bad Request"),
    ({"start_time": PAST, "last_by_subj": "a.1"}, "Bad Request"),
    ({"last_by_subj": "a.1", "next_by_subj": "a.1"}, "Bad Request"),
    ({"last_by_subj": "a.1", "batch": 2}, "Bad Request"),
    ({"last_by_subj": "a.1", "multi_last": ["a.1"]}, "Bad Request"),
    ({"next_by_subj": "a.1", "multi_last": ["a.1"]}, "Bad Request"),
    ({"multi_last": ["a.1"], "up_to_seq": 3, "up_to_time": PAST}, "Bad Request"),
]


async def test_refusals(js_server: ServerProcess, connect: Connect) -> None:
    nc = await seeded(js_server, connect)
    got = [(body, (await direct_get(nc, body))) for body, _ in REFUSALS]
    assert got == [(body, [status(408, text)]) for body, text in REFUSALS]


async def test_subject_in_the_request_subject(js_server: ServerProcess, connect: Connect) -> None:
    """`DIRECT.GET.S.<subject>` is last_by_subj; a body may only add no_hdr."""
    nc = await seeded(js_server, connect)
    assert timeless(await direct_get(nc, b"", "S.a.*")) == [msg("a.3", 8, b"8", X="y")]
    assert await direct_get(nc, b'{"no_hdr": true}', "S.a.1") == [({}, b"4")]
    assert await direct_get(nc, b"", "S.q") == [status(404, "Message Not Found")]
    assert await direct_get(nc, b"{bad", "S.a.1") == [status(408, "Malformed Request")]
    for body in ({"seq": 1}, {"batch": -1}, {"up_to_seq": 1}, {"start_time": PAST}):
        assert await direct_get(nc, json.dumps(body).encode(), "S.a.1") == [
            status(408, "Bad Request")
        ]


async def test_decoding_follows_go(js_server: ServerProcess, connect: Connect) -> None:
    """Keys match case-insensitively and the last duplicate wins; null means unset."""
    nc = await seeded(js_server, connect)
    for body, seq in ((b'{"SEQ": 2}', 2), (b'{"seq": 3, "Seq": 2}', 2), (b' {"seq": 1} ', 1)):
        assert (await direct_get(nc, body))[0][0]["Nats-Sequence"] == str(seq)
    assert timeless(await direct_get(nc, {"seq": 2, "start_time": None})) == [msg("a.2", 2, b"2")]
    assert await direct_get(nc, {"seq": 2, "batch": -1}) == [eob(7, 0)]


# -- start_time ---------------------------------------------------------------------------


async def test_start_time(js_server: ServerProcess, connect: Connect) -> None:
    nc = await seeded(js_server, connect)
    fifth = stamp_of(await direct_get(nc, {"seq": 5}))
    assert timeless(await direct_get(nc, {"start_time": PAST})) == [msg("a.1", 1, b"1")]
    assert timeless(await direct_get(nc, {"start_time": fifth})) == [msg("c", 5, b"5")]
    assert await direct_get(nc, {"start_time": FUTURE}) == [status(404, "Message Not Found")]
    assert timeless(await direct_get(nc, {"start_time": fifth, "batch": 2})) == [
        msg("c", 5, b"5", 3, 0),
        msg("b.2", 6, b"6", 2, 5),
        eob(2, 6),
    ]
    by_subject = {"start_time": fifth, "next_by_subj": "a.*", "batch": 5}
    assert timeless(await direct_get(nc, by_subject)) == [
        msg("a.2", 7, b"7", 1, 0),
        msg("a.3", 8, b"8", 0, 7, X="y"),
        eob(0, 8),
    ]
    assert timeless(await direct_get(nc, {"start_time": PAST, "next_by_subj": "b.*"})) == [
        msg("b.1", 3, b"3")
    ]


async def test_start_time_on_an_empty_stream(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    await create(nc, "E", ["e"])
    for body in ({"start_time": PAST}, {"start_time": PAST, "batch": 2}):
        assert await direct_get(nc, body, "E") == [status(404, "Message Not Found")]
    assert await direct_get(nc, {"multi_last": [">"]}, "E") == [status(404, "No Results")]


# -- multi_last ---------------------------------------------------------------------------


async def test_multi_last(js_server: ServerProcess, connect: Connect) -> None:
    nc = await seeded(js_server, connect)
    assert timeless(await direct_get(nc, {"multi_last": ["a.*"]})) == [*A_LASTS, eob(0, 8, 8)]
    overlapping = {"multi_last": ["a.>", "a.1", "a.*"], "no_hdr": True}  # no_hdr is ignored
    assert timeless(await direct_get(nc, overlapping)) == [*A_LASTS, eob(0, 8, 8)]
    assert timeless(await direct_get(nc, {"multi_last": [">"]})) == [
        msg("b.1", 3, b"3", 5, 0),
        msg("a.1", 4, b"4", 4, 3),
        msg("c", 5, b"5", 3, 4),
        msg("b.2", 6, b"6", 2, 5),
        msg("a.2", 7, b"7", 1, 6),
        msg("a.3", 8, b"8", 0, 7, X="y"),
        eob(0, 8, 8),
    ]
    for filters in (["x.*"], [""], ["a.>.b"], [">.1"], ["a.*b"]):
        assert await direct_get(nc, {"multi_last": filters}) == [status(404, "No Results")]


async def test_multi_last_up_to_seq_and_floor(js_server: ServerProcess, connect: Connect) -> None:
    """up_to_seq is a ceiling per subject; seq is a floor that still counts in pending."""
    nc = await seeded(js_server, connect)
    assert timeless(await direct_get(nc, {"multi_last": ["a.*", "c"], "up_to_seq": 5})) == [
        msg("a.2", 2, b"2", 2, 0),
        msg("a.1", 4, b"4", 1, 2),
        msg("c", 5, b"5", 0, 4),
        eob(0, 5, 5),
    ]
    assert timeless(await direct_get(nc, {"multi_last": ["*.>"], "up_to_seq": 1})) == [
        msg("a.1", 1, b"1", 0, 0),
        eob(0, 1, 1),
    ]
    assert await direct_get(nc, {"multi_last": ["b.*"], "up_to_seq": 2}) == [
        status(404, "No Results")
    ]
    assert timeless(await direct_get(nc, {"multi_last": ["a.*"], "seq": 5})) == [
        msg("a.2", 7, b"7", 1, 0),
        msg("a.3", 8, b"8", 0, 7, X="y"),
        eob(0, 8, 8),
    ]
    assert await direct_get(nc, {"multi_last": ["a.*"], "seq": 9}) == [eob(0, 0, 8)]


async def test_multi_last_up_to_time(js_server: ServerProcess, connect: Connect) -> None:
    """up_to_time keeps messages stored strictly before it; none before the first is 404."""
    nc = await seeded(js_server, connect)
    fifth = stamp_of(await direct_get(nc, {"seq": 5}))
    first = stamp_of(await direct_get(nc, {"seq": 1}))
    assert timeless(await direct_get(nc, {"multi_last": ["a.*"], "up_to_time": fifth})) == [
        msg("a.2", 2, b"2", 1, 0),
        msg("a.1", 4, b"4", 0, 2),
        eob(0, 4, 4),
    ]
    for stamp in (first, PAST):
        assert await direct_get(nc, {"multi_last": ["a.*"], "up_to_time": stamp}) == [
            status(404, "No Results")
        ]
    future = {"multi_last": ["a.*"], "up_to_time": FUTURE, "start_time": PAST}
    assert timeless(await direct_get(nc, future)) == [*A_LASTS, eob(0, 8, 8)]


async def test_multi_last_batch_and_max_bytes(js_server: ServerProcess, connect: Connect) -> None:
    nc = await seeded(js_server, connect)
    assert timeless(await direct_get(nc, {"multi_last": ["a.*", "b.*"], "batch": 2})) == [
        msg("b.1", 3, b"3", 4, 0),
        msg("a.1", 4, b"4", 3, 3),
        eob(3, 4, 8),
    ]
    floor_and_batch = {"multi_last": ["a.*", "c"], "batch": 2, "seq": 5}
    assert timeless(await direct_get(nc, floor_and_batch)) == [
        msg("c", 5, b"5", 2, 0),
        msg("a.2", 7, b"7", 1, 5),
        eob(1, 7, 8),
    ]
    for limit in (1, -1):
        assert timeless(await direct_get(nc, {"multi_last": ["a.*"], "max_bytes": limit})) == [
            A_LASTS[0],
            eob(2, 4, 8),
        ]
    assert timeless(await direct_get(nc, {"multi_last": ["a.*"], "batch": -1})) == [
        *A_LASTS,
        eob(0, 8, 8),
    ]


@pytest.mark.parametrize(("storage", "found"), [("file", False), ("memory", True)])
async def test_multi_last_ceiling_past_the_end(
    js_server: ServerProcess, connect: Connect, storage: str, found: bool
) -> None:
    """An up_to_seq past the last sequence: the reference's two stores disagree, kept as is."""
    nc = await connect(js_server)
    await create(nc, "M", ["m.>"], storage)
    js = nc.jetstream(timeout=5)
    for subject in ("m.1", "m.2", "m.1"):
        await js.publish(subject, b"v")
    got = timeless(await direct_get(nc, {"multi_last": ["m.*"], "up_to_seq": 100}, "M"))
    expected = [
        msg("m.2", 2, b"v", 1, 0, stream="M"),
        msg("m.1", 3, b"v", 0, 2, stream="M"),
        eob(0, 3, 100),
    ]
    assert got == (expected if found else [status(404, "No Results")])


async def test_multi_last_too_many_results(js_server: ServerProcess, connect: Connect) -> None:
    """At most 1024 subjects per answer: one more is 413, whatever batch asks for."""
    nc = await connect(js_server)
    await create(nc, "K", ["k.>"])
    js = nc.jetstream(timeout=10)
    await asyncio.gather(*(js.publish(f"k.{i}", b"v") for i in range(1024)))
    replies = await direct_get(nc, {"multi_last": ["k.*"]}, "K")
    assert (len(replies), replies[-1]) == (1025, eob(0, 1024, 1024))
    assert [int(h["Nats-Sequence"]) for h, _ in replies[:-1]] == list(range(1, 1025))
    await js.publish("k.extra", b"v")
    for body in ({"multi_last": ["k.*"]}, {"multi_last": [">"], "batch": 1}):
        assert await direct_get(nc, body, "K") == [status(413, "Too Many Results")]
    assert len(await direct_get(nc, {"multi_last": ["k.*"], "up_to_seq": 1024}, "K")) == 1025


async def test_exact_header_bytes(js_server: ServerProcess, connect: Connect) -> None:
    """What nats-py hides: the header order (stored headers first) and the EOB block."""
    await seeded(js_server, connect)
    host, port = js_server.url.removeprefix("nats://").rsplit(":", 1)
    raw = await RawClient.connect(host, int(port))
    await raw.handshake()
    body = json.dumps({"multi_last": ["a.3", "c"]}).encode()
    await raw.send(b"SUB in 1\r\nPUB $JS.API.DIRECT.GET.S in %d\r\n%s\r\n" % (len(body), body))
    blocks = []
    for _ in range(3):
        line, payload = await raw.read_op()
        assert line.startswith(b"HMSG in 1 ") and payload is not None
        blocks.append(payload[: int(line.split()[-2])])
    stamp = rb"Nats-Time-Stamp: [^\r]+\r\n"
    assert re.fullmatch(
        rb"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: c\r\nNats-Sequence: 5\r\n"
        + stamp
        + rb"Nats-Num-Pending: 1\r\nNats-Last-Sequence: 0\r\n\r\n",
        blocks[0],
    )
    assert re.fullmatch(
        rb"NATS/1.0\r\nX: y\r\nNats-Stream: S\r\nNats-Subject: a.3\r\nNats-Sequence: 8\r\n"
        + stamp
        + rb"Nats-Num-Pending: 0\r\nNats-Last-Sequence: 5\r\n\r\n",
        blocks[1],
    )
    assert blocks[2] == (
        b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 8\r\n"
        b"Nats-UpTo-Sequence: 8\r\n\r\n"
    )
    raw.writer.close()


# -- jetlake's store work ----------------------------------------------------------------


def test_multi_last_reads_only_the_subject_index() -> None:
    """A multi_last over a long stream resolves its sequences without loading one message."""
    store = MemoryStore(name="idx")
    store.append([NewMsg(f"s.{i % 50}", None, b"x", i + 1) for i in range(5000)])

    def no_reads(*_: object) -> None:
        raise AssertionError("multi_last touched the messages")

    store._fetch = no_reads  # type: ignore[method-assign]
    assert last_seqs(store, ["s.*"], 5000) == list(range(4951, 5001))
    assert last_seqs(store, ["s.1", "s.>"], 100) == list(range(51, 101))
    assert last_seqs(store, ["s.1"], 1) == []
