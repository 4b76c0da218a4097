"""Header blocks edited without parsing them whole (what a counter or a batch rewrites)."""

from __future__ import annotations

from ingest.parser.headers import parse_headers, remove_header, set_header

BLOCK = b"NATS/1.0\r\nA: 1\r\nNats-Incr: +10\r\nB: 2\r\n\r\n"


def test_set_header_replaces_in_place_or_appends() -> None:
    assert (
        set_header(BLOCK, b"Nats-Incr", b"5") == b"NATS/1.0\r\nA: 1\r\nNats-Incr: 5\r\nB: 2\r\n\r\n"
    )
    assert set_header(BLOCK, b"nats-incr", b"5") == (
        b"NATS/1.0\r\nA: 1\r\nnats-incr: 5\r\nB: 2\r\n\r\n"
    )
    assert set_header(BLOCK, b"X", b"y").endswith(b"B: 2\r\nX: y\r\n\r\n")
    assert set_header(None, b"X", b"y") == b"NATS/1.0\r\nX: y\r\n\r\n"
    assert parse_headers(set_header(BLOCK, b"B", b"3"))[2] == {
        "A": ["1"],
        "Nats-Incr": ["+10"],
        "B": ["3"],
    }


def test_remove_header_drops_every_line_of_the_name_only() -> None:
    block = b"NATS/1.0\r\nA: 1\r\nAB: x\r\nA: 2\r\n\r\n"
    assert remove_header(block, b"a") == b"NATS/1.0\r\nAB: x\r\n\r\n"
    assert remove_header(BLOCK, b"Missing") == BLOCK
