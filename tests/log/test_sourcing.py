"""Durable sourcing's pure rules: names, requests, what the origin makes of them, replies."""

from __future__ import annotations

import json

from log.consumers.config import ConsumerConfig
from log.sources import External, StreamSource
from log.sourcing import (
    Start,
    api_subject,
    consumer_name,
    create_request,
    deliver_subject,
    kept_start,
    origin_side,
    parse_ack_reply,
    retry_delay,
)


def test_names_are_the_references() -> None:
    """As nats-server 2.15.1 names them for streams M and S in account $G."""
    origin = StreamSource("WQ")
    assert consumer_name("M", "$G", origin, (), mirror=True) == "JS_MIRROR_ih8eMwqr"
    assert consumer_name("S", "$G", origin, (origin,), mirror=False) == "JS_SRC_N6lXlrSF"


def test_one_origin_sourced_twice_gets_two_names() -> None:
    a = StreamSource("O", filter_subject="a")
    b = StreamSource("O", filter_subject="b")
    names = {consumer_name("S", "$G", s, (a, b), mirror=False) for s in (a, b)}
    assert len(names) == 2 and consumer_name("S", "$G", a, (a,), mirror=False) not in names


def test_external_prefixes_rewrite_api_and_delivery() -> None:
    ext = StreamSource("O", external=External("JS.A.API", "dlv."))
    assert api_subject(ext, "$JS.API.CONSUMER.CREATE.O") == "JS.A.API.CONSUMER.CREATE.O"
    assert deliver_subject(ext, "t", mirror=False) == "dlv.S.t"
    assert deliver_subject(StreamSource("O"), "t", mirror=True) == "$JS.M.t"


def test_create_request_starts_where_asked() -> None:
    src = StreamSource("O", subject_transforms=())
    subject, body = create_request(src, "JS_SRC_x", "$JS.S.t", Start(seq=7), {"k": "v"})
    cfg = json.loads(body)["config"]
    assert subject == "$JS.API.CONSUMER.CREATE.O"
    assert (cfg["deliver_policy"], cfg["opt_start_seq"]) == ("by_start_sequence", 7)
    assert cfg["direct"] and cfg["sourcing"] and cfg["flow_control"]
    _, body = create_request(src, "n", "d", Start(), {})
    assert json.loads(body)["config"]["deliver_policy"] == "all"


def test_the_origin_keeps_a_durable_only_where_messages_wait_for_it() -> None:
    asked = ConsumerConfig(name="JS_SRC_x", direct=True, sourcing=True, max_deliver=1)
    durable = origin_side(asked, "workqueue", "u")
    assert (durable.durable_name, durable.ack_policy, durable.direct) == (
        "JS_SRC_x",
        "flow_control",
        False,
    )
    assert (durable.max_deliver, durable.inactive_threshold) == (0, 0)
    unlisted = origin_side(asked, "limits", "u")
    assert (unlisted.name, unlisted.direct, unlisted.durable_name) == ("JS_SRC_x-u", True, "")
    plain = ConsumerConfig(name="c")
    assert origin_side(plain, "workqueue", "u") is plain


def test_a_durable_asked_again_keeps_its_start() -> None:
    old = ConsumerConfig(durable_name="d", sourcing=True, deliver_policy="all")
    new = ConsumerConfig(
        durable_name="d", sourcing=True, deliver_policy="by_start_sequence", opt_start_seq=9
    )
    assert (kept_start(new, old).deliver_policy, kept_start(new, old).opt_start_seq) == ("all", 0)


def test_ack_replies_in_both_forms() -> None:
    short = parse_ack_reply("$JS.ACK.O.C.1.5.3.1700000000000000000.2")
    assert short is not None and (short.stream_seq, short.consumer_seq, short.pending) == (5, 3, 2)
    long = parse_ack_reply("$JS.ACK.hub.HASH.O.C.2.6.4.17.0.rnd")
    assert long is not None and (long.consumer, long.delivered, long.stream_seq) == ("C", 2, 6)
    assert parse_ack_reply("$JS.FC.O.C.x") is None
    assert parse_ack_reply("$JS.ACK.O.C.a.b.c.d.e") is None


def test_retries_back_off_to_a_minute() -> None:
    assert [retry_delay(n) // 1_000_000_000 for n in (1, 2, 3, 6, 20)] == [2, 4, 8, 60, 60]
