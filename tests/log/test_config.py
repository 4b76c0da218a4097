"""Stream config defaults, validation and update rules, checked against the reference's answers."""

from __future__ import annotations

from typing import Any

import pytest

from log import config
from log.config import StreamConfig, check_update, from_request
from log.errors import ApiError

# What nats-server 2.x echoes for {"name": "foo", "subjects": ["foo.>"]}, server metadata aside.
REFERENCE_DEFAULTS = {
    "name": "foo",
    "subjects": ["foo.>"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120000000000,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
    "metadata": {"_nats.req.level": "0"},
}


def test_defaults_match_the_reference() -> None:
    assert from_request({"name": "foo", "subjects": ["foo.>"]}).to_json() == REFERENCE_DEFAULTS


def test_subjects_default_to_the_name_and_window_to_max_age() -> None:
    cfg = from_request({"name": "x", "max_age": 1_000_000_000})
    assert cfg.subjects == ("x",)
    assert cfg.duplicate_window == 1_000_000_000


def test_ttl_streams_require_api_level_one() -> None:
    cfg = from_request({"name": "x", "allow_msg_ttl": True})
    assert cfg.metadata[config.REQUIRED_LEVEL_KEY] == "1"


def test_zero_and_negative_limits_mean_unlimited() -> None:
    cfg = from_request({"name": "x", "max_msgs": 0, "max_bytes": -7, "max_msg_size": 0})
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msg_size) == (-1, -1, -1)


@pytest.mark.parametrize(
    ("request_body", "err_code", "description"),
    [
        (
            {"name": "a b"},
            10052,
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ),
        ({"name": "x", "subjects": ["a.*", "a.b"]}, 10052, 'subject "a.*" overlaps with "a.b"'),
        ({"name": "x", "subjects": ["a..b"]}, 10052, "invalid subject"),
        ({"name": "x", "subjects": ["a", "a"]}, 10052, 'subject "a" overlaps with "a"'),
        (
            {"name": "x", "retention": "bogus"},
            10025,
            'invalid JSON: can not unmarshal "\\"bogus\\""',
        ),
        ({"name": "x", "max_age": 5}, 10052, "max age needs to be >= 100ms"),
        (
            {"name": "x", "deny_purge": True, "allow_rollup_hdrs": True},
            10052,
            "roll-ups require the purge permission",
        ),
        (
            {"name": "x", "discard_new_per_subject": True},
            10052,
            "discard new per subject requires discard new policy to be set",
        ),
        (
            {"name": "x", "discard": "new", "discard_new_per_subject": True},
            10052,
            "discard new per subject requires max msgs per subject > 0",
        ),
        (
            {"name": "x", "max_age": 1_000_000_000, "duplicate_window": 2_000_000_000},
            10052,
            "duplicates window can not be larger then max age",
        ),
        ({"name": "x", "num_replicas": -1}, 10133, "replicas count cannot be negative"),
        (
            {"name": "x", "subjects": ["$JS.API.>"]},
            10052,
            "subjects that overlap with jetstream api require no-ack to be true",
        ),
        (
            {"name": "x", "subjects": [">"]},
            10052,
            "capturing all subjects requires no-ack to be true",
        ),
    ],
)
def test_invalid_configs_are_refused_like_the_reference(
    request_body: dict[str, Any], err_code: int, description: str
) -> None:
    with pytest.raises(ApiError) as info:
        from_request(request_body)
    assert (info.value.err_code, info.value.description) == (err_code, description)


def _cfg(**fields: Any) -> StreamConfig:
    return from_request({"name": "s", "subjects": ["s.>"], **fields})


@pytest.mark.parametrize(
    ("old", "new", "description"),
    [
        ({}, {"storage": "memory"}, "stream configuration update can not change storage type"),
        (
            {},
            {"retention": "workqueue"},
            "stream configuration update can not change retention policy to/from workqueue",
        ),
        ({"sealed": True}, {}, "stream configuration update can not unseal a sealed stream"),
        (
            {"deny_delete": True},
            {},
            "stream configuration update can not cancel deny message deletes",
        ),
        ({"deny_purge": True}, {}, "stream configuration update can not cancel deny purge"),
        ({"allow_msg_ttl": True}, {}, "message TTL status can not be disabled"),
    ],
)
def test_update_refuses_what_is_not_editable(
    old: dict[str, Any], new: dict[str, Any], description: str
) -> None:
    with pytest.raises(ApiError) as info:
        check_update(_cfg(**old), _cfg(**new))
    assert (info.value.err_code, info.value.description) == (10052, description)


def test_update_to_replicas_above_one_is_refused_on_a_single_server() -> None:
    with pytest.raises(ApiError) as info:
        check_update(_cfg(), _cfg(num_replicas=3))
    assert info.value.err_code == 10074


def test_update_changes_limits_and_sealing_locks_the_stream() -> None:
    updated = check_update(_cfg(), _cfg(max_msgs=5, retention="interest"))
    assert (updated.max_msgs, updated.retention) == (5, "interest")
    sealed = check_update(_cfg(max_age=10**9, allow_rollup_hdrs=True), _cfg(sealed=True))
    assert (sealed.max_age, sealed.discard, sealed.deny_delete, sealed.deny_purge) == (
        0,
        "new",
        True,
        True,
    )
    assert not sealed.allow_rollup_hdrs


def test_config_round_trips_through_its_json() -> None:
    cfg = _cfg(description="d", metadata={"k": "v"}, allow_direct=True, max_msgs_per_subject=3)
    assert from_request(cfg.to_json()) == cfg
