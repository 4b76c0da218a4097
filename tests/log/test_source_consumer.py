"""A source's or mirror's own `consumer` (API level 4): the reference's refusals, the
index name that tells it apart, and the requests a link sends for it."""

from __future__ import annotations

from typing import Any

import pytest

from log import sourcing
from log.config import from_request
from log.errors import ApiError
from log.sources import ConsumerSource, StreamSource, name_hash

OWN = {"name": "C", "deliver_subject": "dlv.c"}


def _refusal(body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiError) as refused:
        from_request(body)
    return refused.value.to_json()


@pytest.mark.parametrize(
    "link",
    [
        {"name": "O", "consumer": {"deliver_subject": "dlv.c"}},
        {"name": "O", "consumer": {"name": "a.b", "deliver_subject": "dlv.c"}},
        {"name": "O", "consumer": {"name": "C"}},
        {"name": "O", "consumer": {"name": "C", "deliver_subject": "dlv.*"}},
        {"name": "O", "consumer": OWN, "opt_start_seq": 2},
        {"name": "O", "consumer": OWN, "opt_start_time": "2024-01-01T00:00:00Z"},
        {"name": "O", "consumer": OWN, "filter_subject": "a"},
        {"name": "O", "consumer": {}},
    ],
)
def test_an_invalid_consumer_is_refused(link: dict[str, Any]) -> None:
    source = _refusal({"name": "S", "sources": [link]})
    assert source == {"code": 400, "err_code": 10215, "description": SOURCE_INVALID}
    mirror = _refusal({"name": "M", "mirror": link})
    assert mirror == {"code": 400, "err_code": 10213, "description": MIRROR_INVALID}


SOURCE_INVALID = "stream source consumer config is invalid"
MIRROR_INVALID = "stream mirror consumer config is invalid"


def test_one_durable_serves_one_source() -> None:
    transformed = {"name": "O", "consumer": OWN, "subject_transforms": [{"src": "a", "dest": "b"}]}
    twice = {"name": "S", "sources": [{"name": "O", "consumer": OWN}, transformed]}
    refused = _refusal(twice)
    assert refused == {
        "code": 400,
        "err_code": 10216,
        "description": "duplicate stream source consumer detected",
    }
    other = {"name": "O", "consumer": {"name": "D", "deliver_subject": "dlv.d"}}
    cfg = from_request({"name": "S", "sources": [{"name": "O", "consumer": OWN}, other]})
    assert [s.to_json()["consumer"] for s in cfg.sources] == [OWN, other["consumer"]]


def test_the_durable_is_part_of_the_index_name() -> None:
    """The copies' `Nats-Stream-Source` names it, as the reference's do."""
    source = StreamSource("O", consumer=ConsumerSource("C", "dlv.c"))
    assert source.index_name == f"O:C={name_hash('C')} > >"
    assert source.header(7, "a.b", "") == f"O:C={name_hash('C')} 7 > > a.b"


def test_a_link_resets_the_durable_and_says_what_it_needs() -> None:
    own = StreamSource("O", consumer=ConsumerSource("C", "dlv.c"))
    assert sourcing.reset_subject(own) == "$JS.API.CONSUMER.RESET.O.C"
    assert sourcing.request_headers(own, mirror=True, level=4, identity="") is None
    plain = StreamSource("O")
    mirror = sourcing.request_headers(plain, mirror=True, level=4, identity="")
    assert mirror == b"NATS/1.0\r\nNats-Required-Api-Level: 4\r\n\r\n"
    source = sourcing.request_headers(own, mirror=False, level=5, identity="abc")
    assert source == b"NATS/1.0\r\nNats-Required-Api-Level: 5\r\nNats-Stream-Identity: abc\r\n\r\n"
    lower = sourcing.request_headers(own, mirror=False, level=4, identity="abc")
    assert lower == b"NATS/1.0\r\nNats-Required-Api-Level: 4\r\n\r\n"


def test_the_durable_must_acknowledge_by_flow_control() -> None:
    own = StreamSource("O", consumer=ConsumerSource("C", "dlv.c"))
    explicit = {"config": {"ack_policy": "explicit"}}
    assert sourcing.durable_refused(own, explicit, mirror=True) == {
        "code": 400,
        "err_code": 10214,
        "description": "stream mirror consumer requires flow control ack policy",
    }
    refused = sourcing.durable_refused(own, explicit, mirror=False)
    assert refused is not None and refused["err_code"] == 10217
    fc = {"config": {"ack_policy": "flow_control"}}
    assert sourcing.durable_refused(own, fc, mirror=False) is None
    assert sourcing.durable_refused(StreamSource("O"), explicit, mirror=False) is None


def test_an_origin_below_level_5_is_asked_again_at_level_4() -> None:
    assert sourcing.level_refused({"err_code": 10185}, 5)
    assert not sourcing.level_refused({"err_code": 10185}, 4)
    assert not sourcing.level_refused({"err_code": 10225}, 5)
