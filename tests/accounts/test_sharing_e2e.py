"""Exports and imports on real servers, the reference and jetlake alike: streams copied
into an importer under its own subjects, services answered across accounts through a
mapped reply that hides the requester's subjects, latency reports, and the JetStream
API used from another account. One server per kind serves every test here."""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from tests.conftest import Connect
from tests.e2e.test_nats_cli import cli
from tests.support.clients import barrier, drain_pending, sync
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess


def url(server: ServerProcess, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


async def users(connect: Connect, server: ServerProcess, *names: str) -> list[NATS]:
    return [await connect(url(server, name)) for name in names]


async def test_a_stream_import_copies_under_the_importers_subjects(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b, c = await users(connect, shared, "a", "b", "c")
    in_b = await b.subscribe(">")
    in_c = await c.subscribe(">")
    await sync(b)
    await sync(c)
    await a.publish("a.x", b"one", reply="back.here")
    await a.publish("a.y", b"two")
    await a.publish("secret.z", b"three")  # exported to C only, and C imports nothing
    await b.publish("b.own", b"mine")
    await barrier(a, b, c)
    got = [(m.subject, m.reply, m.data) for m in await drain_pending(in_b)]
    assert sorted(got) == [
        ("b.own", "", b"mine"),
        ("mapped.x", "back.here", b"one"),
        ("p.a.x", "back.here", b"one"),
        ("p.a.y", "", b"two"),
    ]
    assert await drain_pending(in_c) == []


async def test_nothing_flows_back_into_the_exporter(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b = await users(connect, shared, "a", "b")
    in_a = await a.subscribe(">")
    await sync(a)
    for subject in ("a.x", "p.a.x", "svc.y", "deliver.x", "mapped.x"):
        await b.publish(subject, b"from b")
    await barrier(b, a)
    assert [m.subject for m in await drain_pending(in_a)] == []


async def test_a_service_import_hides_the_requesters_reply(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b = await users(connect, shared, "a", "b")
    seen: list[Msg] = []

    async def respond(msg: Msg) -> None:
        seen.append(msg)
        await a.publish(msg.reply, b"part 1")
        await a.publish(msg.reply, b"part 2", headers={"k": "v"})

    await a.subscribe("svc.>", cb=respond)
    await sync(a)
    inbox = b.new_inbox()
    answers = await b.subscribe(inbox)
    await sync(b)
    await b.publish("local.x", b"question", reply=inbox)
    first, second = await answers.next_msg(5), await answers.next_msg(5)
    assert [(first.data, first.headers), (second.data, second.headers)] == [
        (b"part 1", None),
        (b"part 2", {"k": "v"}),
    ]
    (request,) = seen
    assert request.subject == "svc.x" and request.data == b"question"
    assert request.reply.startswith("_R_.") and inbox not in request.reply
    assert request.headers is not None
    assert json.loads(request.headers["Nats-Request-Info"])["acc"] == "B"
    # The mapped reply leads only to the requester's inbox: A reaches nothing else of B's.
    assert b.new_inbox() not in request.reply


async def test_a_singleton_answer_crosses_once_with_a_latency_report(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b = await users(connect, shared, "a", "b")
    replies: list[str] = []

    async def respond(msg: Msg) -> None:
        replies.append(msg.reply)
        await a.publish(msg.reply, b"first")
        await a.publish(msg.reply, b"second")  # a singleton's mapping is gone by now

    await a.subscribe("one.>", cb=respond)
    latency = await a.subscribe("lat.one")
    await sync(a)
    inbox = b.new_inbox()
    answers = await b.subscribe(inbox)
    await sync(b)
    await b.publish("one.q", b"?", reply=inbox)
    assert (await answers.next_msg(5)).data == b"first"
    report = json.loads((await latency.next_msg(5)).data)
    assert report["type"] == "io.nats.server.metric.v1.service_latency"
    assert (report["status"], report["requestor"]["acc"], report["responder"]["acc"]) == (
        200,
        "B",
        "A",
    )
    assert report["total"] >= report["service"] >= 0
    await a.publish(replies[0], b"late")
    await barrier(a, b)
    assert [m.data for m in await drain_pending(answers)] == []


async def test_no_responders_through_an_import(shared: ServerProcess, connect: Connect) -> None:
    (b,) = await users(connect, shared, "b")
    with pytest.raises(NoRespondersError):
        await b.request("one.nobody", b"", timeout=5)


async def test_the_jetstream_api_used_from_another_account(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b = await users(connect, shared, "a", "b")
    name = f"API{id(b) % 10000}"
    remote = b.jetstream(prefix="$JS.A.API")
    await remote.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(3):
        await a.jetstream().publish(f"{name.lower()}.{i}", f"m{i}".encode())
    info = await remote.stream_info(name)
    assert info.state.messages == 3
    sub = await remote.pull_subscribe(f"{name.lower()}.>", durable="D", stream=name)
    msgs = await sub.fetch(3, timeout=5)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
    for msg in msgs:  # acks cross through the import of `$JS.ACK.>`
        await msg.ack_sync(timeout=5)
    consumer = await a.jetstream().consumer_info(name, "D")
    assert (consumer.num_ack_pending, consumer.ack_floor.stream_seq) == (0, 3)
    # B's own JetStream is its own: the stream is not there.
    assert name not in [s.config.name for s in await b.jetstream().streams_info()]


async def test_a_source_in_another_account_through_the_api_prefix(
    shared: ServerProcess, connect: Connect
) -> None:
    a, b = await users(connect, shared, "a", "b")
    name = f"ORIGIN{id(a) % 10000}"
    await a.jetstream().add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(5):
        await a.jetstream().publish(f"{name.lower()}.{i}", f"m{i}".encode())
    copy = f"COPY{id(a) % 10000}"
    await b.jetstream()._jsm._api_request(
        f"$JS.API.STREAM.CREATE.{copy}",
        json.dumps(
            {
                "name": copy,
                "sources": [{"name": name, "external": {"api": "$JS.A.API", "deliver": "deliver"}}],
                "storage": "file",
            }
        ).encode(),
        timeout=5,
    )

    async def copied() -> bool:
        return (await b.jetstream().stream_info(copy)).state.messages >= 5

    await poll_async(copied, "the source's 5 messages copied", 15, interval=0.1)
    msg = await b.jetstream().get_msg(copy, 5)
    assert (msg.subject, msg.data) == (f"{name.lower()}.4", b"m4")


async def test_no_way_into_another_accounts_jetstream_without_an_import(
    shared: ServerProcess, connect: Connect
) -> None:
    """D has JetStream of its own and no imports: A's API, acks and deliveries stay out of
    its reach, under any prefix a mirror or source could name."""
    a, d = await users(connect, shared, "a", "d")
    name = f"PRIVATE{id(d) % 10000}"
    await a.jetstream().add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for subject in (
        "$JS.A.API.INFO",
        f"$JS.A.API.STREAM.INFO.{name}",
        f"$JS.A.API.CONSUMER.CREATE.{name}",
        f"$JS.ACK.{name}.C.1.1.1.0.0",
    ):
        with pytest.raises(NoRespondersError):
            await d.request(subject, b"{}", timeout=5)
    names = await d.request("$JS.API.STREAM.NAMES", b"", timeout=5)
    assert json.loads(names.data)["streams"] is None  # D's own JetStream: empty
    in_d = await d.subscribe(">")
    await sync(d)
    await a.jetstream().publish(f"{name.lower()}.x", b"secret")
    await a.publish("deliver.S.x", b"delivery")
    await barrier(a, d)
    assert await drain_pending(in_d) == []


async def test_an_account_without_jetstream_uses_the_imported_api_on_its_own_subjects(
    shared: ServerProcess, connect: Connect
) -> None:
    """E has no JetStream and imports A's API unprefixed: A answers, and nothing says
    "JetStream not enabled" besides."""
    (e,) = await users(connect, shared, "e")
    inbox = e.new_inbox()
    answers = await e.subscribe(inbox)
    await sync(e)
    await e.publish("$JS.API.INFO", b"", reply=inbox)
    info = json.loads((await answers.next_msg(5)).data)
    assert "error" not in info and info["type"] == "io.nats.jetstream.api.v1.account_info_response"
    await sync(e)  # a refusal would be answered while the request is routed
    assert await drain_pending(answers) == []


async def test_imports_map_wildcards_token_by_token(
    shared: ServerProcess, connect: Connect
) -> None:
    wa, wb = await users(connect, shared, "wa", "wb")

    async def quote(msg: Msg) -> None:
        await msg.respond(("quote for " + msg.subject).encode())

    await wa.subscribe("quote.*", cb=quote)
    seen = await wb.subscribe("got.>")
    await barrier(wa, wb)
    await wa.publish("ev.x.y", b"event")
    assert (await seen.next_msg(5)).subject == "got.y.x"
    reply = await wb.request("quote_for.abc", b"", timeout=5)
    assert reply.data == b"quote for quote.abc"


async def test_natscli_reaches_the_exported_jetstream_with_an_api_prefix(
    shared: ServerProcess, connect: Connect
) -> None:
    """natscli (nats.go) as B: `--js-api-prefix` lists and reads A's stream."""
    (a,) = await users(connect, shared, "a")
    name = f"CLI{id(a) % 10000}"
    await a.jetstream().add_stream(name=name, subjects=[f"{name.lower()}.>"])
    await a.jetstream().publish(f"{name.lower()}.x", b"seen from B")
    prefix = ("--js-api-prefix", "$JS.A.API")
    code, out = await cli(url(shared, "b"), *prefix, "stream", "ls", "--names")
    assert code == 0 and name in out.split(), out
    code, out = await cli(url(shared, "b"), *prefix, "stream", "get", name, "1")
    assert code == 0 and "seen from B" in out, out


async def test_a_requester_cannot_name_another_account_in_the_request_info(
    shared: ServerProcess, connect: Connect
) -> None:
    """An exporter may trust `Nats-Request-Info` (the SQL service's walls do): the server
    puts the importing account there, over whatever the client sent."""
    a, b = await users(connect, shared, "a", "b")
    seen: list[Msg] = []

    async def respond(msg: Msg) -> None:
        seen.append(msg)
        await a.publish(msg.reply, b"ok")

    await a.subscribe("svc.>", cb=respond)
    await sync(a)
    forged = {"Nats-Request-Info": json.dumps({"acc": "A"})}
    answer = await b.request("local.x", b"question", timeout=5, headers=forged)
    assert answer.data == b"ok"
    (request,) = seen
    assert request.headers is not None
    assert json.loads(request.headers["Nats-Request-Info"])["acc"] == "B"
