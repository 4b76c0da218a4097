"""The strict field check every config parser runs first, and the level fast batch
publish requires (pure, no server)."""

from __future__ import annotations

from typing import Any

import pytest

from log.config import from_request
from log.errors import ApiError
from log.request_fields import fields, refuse_unknown

SCHEMA = fields("a b", inner=fields("c"), many=fields("d"))


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"a": 1, "z": 2, "y": 3}, "z"),  # the first in document order
        ({"inner": {"c": 1, "q": 2}}, "q"),
        ({"many": [{"d": 1}, {"r": 1}]}, "r"),
    ],
)
def test_unknown_fields_at_any_depth(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as refused:
        refuse_unknown(raw, SCHEMA)
    assert refused.value.description == f'invalid JSON: json: unknown field "{field}"'


def test_known_fields_and_values_of_another_type_pass_to_the_typed_reads() -> None:
    refuse_unknown({"a": None, "inner": None, "many": "not a list", "b": {"x": 1}}, SCHEMA)


def test_fast_batch_needs_level_4() -> None:
    cfg = from_request({"name": "F", "allow_batched": True})
    assert cfg.allow_batched and cfg.metadata["_nats.req.level"] == "4"
