"""The `sources` config and the progress header, without a server."""

from __future__ import annotations

import pytest

from log.errors import ApiError
from log.sources import (
    StreamSource,
    Transform,
    check_cycle,
    check_sources,
    parse_source_header,
    parse_sources,
    stream_identity,
)


def test_round_trip_of_the_config() -> None:
    raw = {
        "sources": [
            {"name": "A", "opt_start_seq": 5, "filter_subject": "a.>"},
            {
                "name": "B",
                "opt_start_time": "2024-01-02T03:04:05.5Z",
                "subject_transforms": [{"src": "b.*", "dest": "x.$1"}],
            },
        ]
    }
    sources = parse_sources(raw)
    assert [s.to_json() for s in sources] == raw["sources"]


def test_header_names_the_source_and_parses_back() -> None:
    plain = StreamSource("A")
    value = plain.header(7, "a.b", "ident123")
    assert value == "A 7 > > a.b ident123"
    assert parse_source_header(value) == (plain.index_name, 7, "ident123")
    many = StreamSource("B", subject_transforms=(Transform("b.*", "x.$1"), Transform("c", "")))
    assert many.header(1, "c", "i") == "B 1 b.*\fc x.$1\f> c i"
    assert parse_source_header("not a copy") is None


def test_identity_is_eight_characters_of_base62_and_stable() -> None:
    first = stream_identity(1_700_000_000_123_456_789)
    assert first == stream_identity(1_700_000_000_123_456_789)
    assert len(first) == 8 and first.isalnum()
    assert first != stream_identity(1_700_000_000_123_456_790)


def test_compiled_rules_filter_and_map() -> None:
    rules = StreamSource("B", subject_transforms=(Transform("b.*", "x.$1"),)).compile()
    ((pattern, transform),) = rules
    assert pattern == "b.*" and transform is not None and transform.match("b.q") == "x.q"
    assert StreamSource("A", filter_subject="a.>").compile() == [("a.>", None)]


@pytest.mark.parametrize(
    ("sources", "code"),
    [
        ((StreamSource("a b"),), 10141),
        ((StreamSource("A"), StreamSource("A")), 10140),
        ((StreamSource("A", filter_subject="x", subject_transforms=(Transform("y", ""),)),), 10144),
        ((StreamSource("A", subject_transforms=(Transform("a..b", ""),)),), 10145),
        ((StreamSource("A", subject_transforms=(Transform("a", "{{x()}}"),)),), 10146),
        ((StreamSource("A", subject_transforms=(Transform(">", ""), Transform("a", ""))),), 10147),
    ],
)
def test_refusals(sources: tuple[StreamSource, ...], code: int) -> None:
    with pytest.raises(ApiError) as refused:
        check_sources(sources)
    assert refused.value.err_code == code


def test_cycles_through_sources_are_refused() -> None:
    from log.config import from_request

    b = from_request({"name": "B", "subjects": ["b"], "sources": [{"name": "C"}]})
    c = from_request({"name": "C", "subjects": ["c"], "sources": [{"name": "A"}]})
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle("A", (StreamSource("B"),), {"B": b, "C": c})
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle("A", (StreamSource("A"),), {})
    check_cycle("A", (StreamSource("B"),), {"B": b})  # B reads C, which does not exist
