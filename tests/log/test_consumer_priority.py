"""Priority groups with a fake clock: config refusals, pull refusals, the three policies."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from log.consumers.config import (
    ConsumerConfig,
    check,
    from_request,
    to_state_json,
    with_defaults,
)
from log.consumers.priority import DEFAULT_PINNED_TTL, PIN_ID
from log.consumers.wire import Advisory, Deliveries, Output, Status
from log.errors import ApiError
from log.segments.api import NewMsg
from tests.log.test_consumer import STREAM, S, deliveries, make, statuses, store_with

PIN = {"priority_groups": ("A",), "priority_policy": "pinned_client", "ack_policy": "explicit"}


def body(**fields: Any) -> bytes:
    return json.dumps({"batch": 1, **fields}).encode()


def to(out: list[Output], reply: str) -> list[int]:
    """The stream seqs delivered to one reply subject."""
    return [
        int(m[1].split(b".")[5])
        for o in out
        if isinstance(o, Deliveries) and o.subject == reply
        for m in o.wire()
    ]


def pins(out: list[Output]) -> list[str]:
    found = []
    for o in out:
        if isinstance(o, Deliveries):
            for m in o.wire():
                hdr = (m[2] or b"").decode()
                found += [line.split(": ", 1)[1] for line in hdr.split("\r\n") if PIN_ID in line]
    return found


def advisories(out: list[Output]) -> list[tuple[str, str, str]]:
    """(kind, group, pin id or reason) of each pin advisory."""
    return [
        (o.subject.split(".")[4], o.body["group"], o.body.get("pinned_id") or o.body["reason"])
        for o in out
        if isinstance(o, Advisory)
    ]


def status_to(out: list[Output], reply: str) -> list[str]:
    return statuses([o for o in out if isinstance(o, Status) and o.subject == reply])


@pytest.mark.parametrize(
    ("raw", "err_code"),
    [
        ({"priority_policy": "overflow"}, 10159),
        ({"priority_policy": "overflow", "priority_groups": [""]}, 10161),
        ({"priority_policy": "overflow", "priority_groups": ["a.b"]}, 10162),
        ({"priority_policy": "overflow", "priority_groups": ["x" * 17]}, 10162),
        ({"priority_groups": ["A"]}, 10196),
        ({"priority_timeout": 5}, 10197),
        (
            {"priority_policy": "prioritized", "priority_groups": ["A"], "deliver_subject": "d"},
            10178,
        ),
        ({"priority_policy": "bogus", "priority_groups": ["A"]}, 10025),
    ],
)
def test_config_refusals(raw: dict[str, Any], err_code: int) -> None:
    with pytest.raises(ApiError) as err:
        check(with_defaults(from_request(raw), STREAM), STREAM)
    assert err.value.err_code == err_code


def test_config_defaults_and_echo() -> None:
    raw = {**PIN, "priority_groups": ["A"], "priority_timeout": -5}
    cfg = with_defaults(from_request(raw), STREAM)
    check(cfg, STREAM)
    assert cfg.priority_timeout == DEFAULT_PINNED_TTL
    doc = cfg.to_json()
    assert (doc["priority_groups"], doc["priority_policy"]) == (["A"], "pinned_client")
    assert doc["metadata"]["_nats.req.level"] == "1"
    assert "priority_policy" not in ConsumerConfig().to_json()


@pytest.mark.parametrize(
    ("policy", "fields", "line"),
    [
        ("pinned_client", {}, "NATS/1.0 400 Bad Request - Priority Group missing"),
        ("pinned_client", {"group": "Z"}, "NATS/1.0 400 Bad Request - Invalid Priority Group"),
        (
            "pinned_client",
            {"group": "A", "min_pending": 3},
            "NATS/1.0 400 Bad Request - Not a Overflow Priority consumer",
        ),
        (
            "overflow",
            {"group": "A", "id": "x"},
            "NATS/1.0 400 Bad Request - Not a Pinned Client Priority consumer",
        ),
        (
            "prioritized",
            {"group": "A", "priority": 10},
            "NATS/1.0 400 Bad Request - Priority must be between 0 and 9",
        ),
        (
            "none",
            {"min_ack_pending": 1},
            "NATS/1.0 400 Bad Request - Not a Overflow Priority consumer",
        ),
    ],
)
def test_pull_refusals(policy: str, fields: dict[str, Any], line: str) -> None:
    groups = () if policy == "none" else ("A",)
    c = make(store_with("s.a"), priority_groups=groups, priority_policy=policy)
    assert statuses(c.pull("inb", body(**fields), 0)) == [line]
    assert len(c.waiting) == 0


def test_overflow_thresholds() -> None:
    c = make(
        store_with(*["s.a"] * 10),
        priority_groups=("A",),
        priority_policy="overflow",
        ack_policy="explicit",
    )
    out = c.pull("a", body(batch=5, group="A", min_pending=10, expires=S), 0) + c.pump(0)
    assert to(out, "a") == [1]  # 10 pending with m1; with m2 only 9, under the threshold
    assert (c.sseq, c.npc, len(c.waiting)) == (2, 9, 1)  # m2 went back, not counted
    assert status_to(c.pump(S), "a") == ["NATS/1.0 408 Request Timeout"]
    out = c.pull("b", body(batch=2, group="A", min_ack_pending=1), S) + c.pump(S)
    assert to(out, "b") == [2, 3]
    out = c.pull("c", body(group="A", min_pending=100, min_ack_pending=100), S)
    out += c.pull("d", body(group="A"), S) + c.pump(S)
    assert (to(out, "c"), to(out, "d")) == ([], [4])
    out = c.pull("n", body(group="A", min_pending=100, no_wait=True), S) + c.pump(S)
    assert status_to(out, "n") == ["NATS/1.0 404 No Messages"]  # not queued for ever
    c.store.append([NewMsg("s.a", None, b"x", 0) for _ in range(94)])
    c.refresh(c.store.state().last_seq)
    assert to(c.pump(S), "c") == [5]  # 100 pending now


def test_pinned_client_gets_a_pin_and_others_wait() -> None:
    c = make(store_with(*["s.a"] * 6), priority_timeout=10 * S, **PIN)
    out = c.pull("stale", body(group="A", id="old"), S) + c.pump(S)
    assert status_to(out, "stale") == ["NATS/1.0 423 Nats-Wrong-Pin-Id"]
    out = c.pull("p1", body(group="A"), S) + c.pump(S)
    assert to(out, "p1") == [1]
    pin = c.priority.pin
    assert pins(out) == [pin] and len(pin) == 22
    assert c.priority.states() == [
        {"group": "A", "pinned_client_id": pin, "pinned_ts": "1970-01-01T00:00:01Z"}
    ]
    out = c.pull("p2", body(group="A", expires=S), S) + c.pump(S)
    assert to(out, "p2") == []
    assert statuses(c.pull("p3", body(group="A", id="nope"), S)) == [
        "NATS/1.0 423 Nats-Pin-Id mismatch"
    ]
    out = c.pull("p1", body(group="A", id=pin), S) + c.pump(S)
    assert (to(out, "p1"), pins(out)) == ([2], [pin])
    assert status_to(c.pump(2 * S), "p2") == ["NATS/1.0 408 Request Timeout"]


def test_pin_moves_after_the_ttl_or_an_unpin() -> None:
    c = make(store_with(*["s.a"] * 6), priority_timeout=5 * S, **PIN)
    c.pull("p1", body(group="A"), 0)
    first = c.pump(0)
    old = c.priority.pin
    out = c.pull("p2", body(group="A", expires=20 * S), S) + c.pump(S)
    assert to(out, "p2") == [] and c.next_deadline(S) == 5 * S
    c.pull("p1", body(group="A", id=old), 4 * S)  # the pinned client is alive: 9 s now
    assert to(c.pump(4 * S), "p1") == [2] and c.next_deadline(4 * S) == 9 * S
    out = c.pump(9 * S)  # silent for the whole TTL: p2 is pinned
    assert to(out, "p2") == [3] and pins(out) != pins(first)
    assert advisories(first) == [("PINNED", "A", old)]
    assert advisories(out) == [("UNPINNED", "A", "timeout"), ("PINNED", "A", c.priority.pin)]
    assert statuses(c.pull("p1", body(group="A", id=old), 9 * S)) == [
        "NATS/1.0 423 Nats-Pin-Id mismatch"
    ]
    c.priority.unpin("A", "admin", 9 * S)
    assert c.priority.states() == [{"group": "A", "pinned_ts": "0001-01-01T00:00:00Z"}]
    out = c.pull("p1", body(group="A"), 9 * S) + c.pump(9 * S)
    assert to(out, "p1") == [4] and c.priority.pin not in ("", old)


def test_pinned_consumer_serves_a_plain_request_without_a_pin() -> None:
    c = make(store_with("s.a"), **PIN)
    out = c.pull("raw", b"1", 0) + c.pump(0)
    assert (to(out, "raw"), pins(out), c.priority.pin) == ([1], [""], "")


def test_prioritized_serves_lowest_first_round_robin_within_a_rank() -> None:
    store = store_with()
    c = make(store, priority_groups=("A",), priority_policy="prioritized")
    for reply, batch, priority in (("c", 1, 5), ("a", 2, 0), ("raw", 0, 0), ("b", 2, 0)):
        req = b"1" if reply == "raw" else body(batch=batch, group="A", priority=priority)
        assert c.pull(reply, req, 0) == []
    store.append([NewMsg("s.a", None, b"x", 0) for _ in range(6)])
    c.refresh(6)
    out = c.pump(0)
    got = [o.subject for o in out if isinstance(o, Deliveries) for _ in o.msgs]
    assert got == ["a", "b", "a", "b", "c", "raw"]


def test_update_changes_the_policy() -> None:
    c = make(store_with("s.a", "s.a"), priority_groups=("A",), priority_policy="overflow")
    c.update_config(dataclasses.replace(c.cfg, priority_policy="prioritized"))
    assert c.waiting.ranked and not c.priority.gated
    assert to(c.pull("x", body(group="A", priority=3), 0) + c.pump(0), "x") == [1]
    assert deliveries(c.pump(0)) == []


def test_config_survives_the_state_file() -> None:
    raw = {"priority_groups": ["A", "B"], "priority_policy": "overflow", "ack_policy": "explicit"}
    cfg = with_defaults(from_request(raw), STREAM)
    assert with_defaults(from_request(to_state_json(cfg)), STREAM) == cfg
