"""What a leafnode link announces and lets through, without I/O."""

from __future__ import annotations

import pytest

from ingest.server.leafnode.interest import JETSTREAM_DENIED, Advertised, Denied


def test_plain_interest_is_announced_once_per_subject() -> None:
    advertised = Advertised()
    assert advertised.change("a.*", None, 1) == b"LS+ a.*\r\n"
    assert advertised.change("a.*", None, 1) is None  # a second subscriber: no news
    assert advertised.change("a.*", None, -1) is None
    assert advertised.change("a.*", None, -1) == b"LS- a.*\r\n"
    assert advertised.change("a.*", None, -1) is None  # never went below nothing
    assert len(advertised) == 0


def test_a_queue_group_announces_its_weight() -> None:
    advertised = Advertised()
    assert advertised.change("w", "q", 1) == b"LS+ w q 1\r\n"
    assert advertised.change("w", "q", 2) == b"LS+ w q 3\r\n"
    assert advertised.change("w", "q", -1) == b"LS+ w q 2\r\n"
    assert advertised.change("w", "q", -2) == b"LS- w q\r\n"


def test_snapshot_is_every_current_line() -> None:
    advertised = Advertised()
    advertised.change("a", None, 1)
    advertised.change("b", "q", 2)
    assert advertised.snapshot() == b"LS+ a\r\nLS+ b q 2\r\n"


@pytest.mark.parametrize(
    ("subject", "denied"),
    [
        (b"$JS.API.STREAM.INFO.X", True),
        (b"$KV.bucket.key", True),
        (b"$JS.edge.API.INFO", False),  # a domain's API crosses
        (b"$JS.ACK.S.C.1.1.1.1.0", False),
        (b"private.x", True),
        (b"private", False),  # `private.>` needs one more token
        (b"exact", True),
        (b"a.z.c", True),
        (b"a.z.d", False),
        (b"public.x", False),
    ],
)
def test_messages_denied(subject: bytes, denied: bool) -> None:
    rules = Denied(JETSTREAM_DENIED)
    rules.extend(["private.>", "exact", "a.*.c"])
    assert rules.message(subject) is denied


@pytest.mark.parametrize(
    ("subject", "denied"),
    [
        ("private.>", True),
        ("private.a.*", True),
        ("private", False),
        (">", False),  # partly denied: announced, its denied messages held back
        ("$JS.API.>", True),
        ("$LDS.abc", False),  # loop detection always crosses
    ],
)
def test_interest_denied_as_a_whole(subject: str, denied: bool) -> None:
    rules = Denied(JETSTREAM_DENIED)
    rules.extend(["private.>", "$LDS.>"])
    assert rules.interest(subject) is denied
