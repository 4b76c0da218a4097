"""Consumer config: the reference's defaults, refusals (code and order) and update rules."""

from __future__ import annotations

from typing import Any

import pytest

from log.config import StreamConfig
from log.consumers.config import check, check_update, from_request, with_defaults
from log.errors import ApiError

STREAM = StreamConfig(name="S", subjects=("s.>",))


def build(**raw: Any) -> Any:
    return with_defaults(from_request(raw), STREAM)


def test_pull_explicit_defaults() -> None:
    cfg = build(durable_name="d", ack_policy="explicit")
    assert cfg.to_json() == {
        "durable_name": "d",
        "name": "d",
        "deliver_policy": "all",
        "ack_policy": "explicit",
        "ack_wait": 30_000_000_000,
        "max_deliver": -1,
        "replay_policy": "instant",
        "max_waiting": 512,
        "max_ack_pending": 1000,
        "num_replicas": 0,
        "metadata": {"_nats.req.level": "0"},
    }


def test_push_ephemeral_defaults_and_backoff() -> None:
    cfg = build(deliver_subject="d", ack_policy="all", backoff=[5, 10])
    out = cfg.to_json()
    assert (out["ack_wait"], out["inactive_threshold"], "max_waiting" in out) == (5, 5e9, False)
    assert out["backoff"] == [5, 10]


@pytest.mark.parametrize(
    ("raw", "err_code"),
    [
        ({"durable_name": "a.b"}, 10052),
        ({"num_replicas": 3}, 10126),
        ({"ack_wait": -1, "ack_policy": "explicit"}, 10183),
        ({"backoff": [1, 2], "max_deliver": 1}, 10116),
        ({"deliver_subject": "s.x"}, 10081),
        ({"deliver_subject": "d", "idle_heartbeat": 1000}, 10083),
        ({"rate_limit_bps": 8}, 10086),
        ({"flow_control": True}, 10089),
        ({"max_expires": 10}, 10115),
        ({"filter_subjects": [""]}, 10139),
        ({"filter_subject": "s..a"}, 10052),
        ({"deliver_policy": "new", "opt_start_seq": 3}, 10094),
        ({"deliver_policy": "by_start_time"}, 10094),
        ({"durable_name": "a", "name": "b"}, 10132),
    ],
)
def test_refusals(raw: dict[str, Any], err_code: int) -> None:
    with pytest.raises(ApiError) as info:
        check(build(**raw), STREAM)
    assert info.value.err_code == err_code


def test_policy_wording() -> None:
    with pytest.raises(ApiError) as info:
        check(build(deliver_policy="last_per_subject"), STREAM)
    assert info.value.description == (
        "consumer delivery policy is deliver last per subject, "
        "but optional filter subject is not set"
    )


def test_bad_enum_is_invalid_json() -> None:
    with pytest.raises(ApiError) as info:
        from_request({"ack_policy": "sometimes"})
    assert info.value.err_code == 10025


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ack_policy": "all"}, "ack policy can not be updated"),
        ({"deliver_policy": "new"}, "deliver policy can not be updated"),
        ({"max_waiting": 3}, "max waiting can not be updated"),
        ({"deliver_subject": "x"}, "can not update pull consumer to push based"),
    ],
)
def test_update_rules(change: dict[str, Any], message: str) -> None:
    old = build(durable_name="d", ack_policy="explicit")
    new = build(**{"durable_name": "d", "ack_policy": "explicit", **change})
    with pytest.raises(ApiError) as info:
        check_update(old, new, deliver_bound=False)
    assert (info.value.err_code, info.value.description) == (10012, message)
    check_update(
        old, build(durable_name="d", ack_policy="explicit", max_deliver=4), deliver_bound=False
    )


def test_pause_until_sets_required_level() -> None:
    cfg = build(pause_until="2099-01-01T00:00:00Z")
    out = cfg.to_json()
    assert (out["pause_until"], out["metadata"]["_nats.req.level"]) == ("2099-01-01T00:00:00Z", "1")
