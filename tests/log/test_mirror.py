"""The `mirror` config and external prefixes, without a server: parsing, the reference's
refusals (codes and words checked against nats-server 2.15) and the update rule."""

from __future__ import annotations

from typing import Any

import pytest

from log.config import StreamConfig, check_update, from_request
from log.errors import ApiError
from log.mirror import check_create
from log.sources import StreamSource, check_cycle


def _refusal(cfg: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiError) as refused:
        from_request(cfg)
    return refused.value.err_code, refused.value.description


def test_a_mirror_round_trips_and_has_no_subjects_or_default_dedup() -> None:
    raw = {
        "name": "M",
        "mirror": {
            "name": "O",
            "opt_start_seq": 3,
            "subject_transforms": [{"src": "o.*", "dest": "m.$1"}],
            "external": {"api": "$JS.hub.API", "deliver": "dlv"},
        },
    }
    cfg = from_request(raw)
    out = cfg.to_json()
    assert out["mirror"] == raw["mirror"]
    assert "subjects" not in out and "duplicate_window" not in out
    assert StreamSource("O").to_json() == {"name": "O"}


def test_an_external_source_echoes_an_empty_deliver_prefix() -> None:
    cfg = from_request({"name": "S", "sources": [{"name": "O", "external": {"api": "a.b"}}]})
    assert cfg.to_json()["sources"] == [{"name": "O", "external": {"api": "a.b", "deliver": ""}}]
    # the reference's internal name: the origin's name with a hash of the prefix
    assert cfg.sources[0].index_name.startswith("O:") and len(cfg.sources[0].index_name) > 10


@pytest.mark.parametrize(
    ("cfg", "code", "words"),
    [
        ({"mirror": {"name": "O"}, "subjects": ["x"]}, 10034, "stream mirrors can not contain"),
        ({"mirror": {"name": "O"}, "sources": [{"name": "O"}]}, 10031, "also contain other"),
        ({"mirror": {"name": "O"}, "first_seq": 5}, 10143, "can not have first sequence"),
        ({"mirror": {"name": "a.b"}}, 10142, "mirrored stream name is invalid"),
        ({"mirror": {}}, 10142, "mirrored stream name is invalid"),
        (
            {"mirror": {"name": "O", "filter_subject": "a", "subject_transforms": [{"src": "b"}]}},
            10150,
            "cannot also have a single subject filter",
        ),
        (
            {"mirror": {"name": "O", "subject_transforms": [{"src": "a.>"}, {"src": "a.b"}]}},
            10152,
            "mirror subject filters can not overlap",
        ),
        (
            {"mirror": {"name": "O", "subject_transforms": [{"src": "a.*", "dest": "{{no()}}"}]}},
            10154,
            "mirror transform: invalid mapping destination",
        ),
        (
            {"mirror": {"name": "O", "subject_transforms": [{"src": "a..b"}]}},
            10151,
            "mirror transform source: invalid subject a..b",
        ),
        (
            {"mirror": {"name": "O"}, "subject_delete_marker_ttl": 5_000_000_000},
            10052,
            "subject delete markers forbidden on mirrors",
        ),
        (
            {"mirror": {"name": "O", "external": {"api": "$JS.API"}}},
            10021,
            "stream external api prefix $JS.API must not overlap with $JS.API",
        ),
        (
            {"mirror": {"name": "O", "external": {"api": "foo.*"}}},
            10052,
            'stream external api prefix "foo.*" must be a valid subject without wildcards',
        ),
        (
            {"mirror": {"name": "O", "external": {"api": "foo", "deliver": "d.*"}}},
            10024,
            "stream external delivery prefix d.* must not contain wildcards",
        ),
    ],
)
def test_refusals(cfg: dict[str, Any], code: int, words: str) -> None:
    got_code, description = _refusal({"name": "E", **cfg})
    assert got_code == code and words in description, description


def test_mirror_direct_without_a_mirror_is_refused_on_create_only() -> None:
    with pytest.raises(ApiError, match="stream has no mirror but does have mirror direct"):
        check_create({"name": "E", "subjects": ["x"], "mirror_direct": True})
    check_create({"name": "E", "mirror": {"name": "O"}, "mirror_direct": True})
    assert from_request({"name": "E", "mirror_direct": True}).mirror_direct  # an update's


def test_mirror_config_is_fixed_but_can_be_dropped() -> None:
    old = from_request({"name": "M", "mirror": {"name": "O"}})
    same = from_request({"name": "M", "mirror": {"name": "O"}, "max_msgs": 10})
    assert check_update(old, same).max_msgs == 10
    changed = from_request({"name": "M", "mirror": {"name": "O", "filter_subject": "o.1"}})
    with pytest.raises(ApiError) as refused:
        check_update(old, changed)
    assert refused.value.err_code == 10055
    promoted = check_update(old, from_request({"name": "M", "subjects": ["m.>"]}))
    assert promoted.mirror is None and promoted.duplicate_window == 120_000_000_000
    with pytest.raises(ApiError) as refused:
        check_update(promoted, from_request({"name": "M", "mirror": {"name": "O"}}))
    assert refused.value.err_code == 10055


def test_cycles_through_mirrors_are_refused_but_not_through_externals() -> None:
    b: StreamConfig = from_request({"name": "B", "mirror": {"name": "A"}})
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle("A", (StreamSource("B"),), {"B": b})
    with pytest.raises(ApiError, match="detected cycle"):
        check_cycle("A", (StreamSource("A"),), {})
    external = from_request({"name": "B", "mirror": {"name": "A", "external": {"api": "x.API"}}})
    check_cycle("A", (StreamSource("B"),), {"B": external})
