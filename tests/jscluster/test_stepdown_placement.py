"""Where a stepdown hands leadership, from the request's placement (pure rule)."""

from __future__ import annotations

import pytest

from ingest.server.jetstream.cluster.stepdown import stepdown_target
from log.errors import ApiError

MEMBERS = ("S0", "S1", "S2")
TAGS = {"S0": frozenset({"az:1"}), "S1": frozenset({"az:2"}), "S2": frozenset({"az:2", "ssd"})}


def target(request: dict[str, object], online: tuple[str, ...] = MEMBERS) -> str | None:
    return stepdown_target(request, me="S0", members=MEMBERS, online=online, cluster="C", tags=TAGS)


@pytest.mark.parametrize(
    "request_",
    [{}, {"placement": None}, {"placement": {}}, {"placement": {"preferred": ""}}],
)
def test_no_placement_leaves_the_choice_to_raft(request_: dict[str, object]) -> None:
    assert target(request_) is None


def test_a_preferred_member_is_chosen() -> None:
    assert target({"placement": {"preferred": "S2"}}) == "S2"


def test_preferred_wins_over_tags() -> None:
    assert target({"placement": {"preferred": "S1", "tags": ["ssd"]}}) == "S1"


@pytest.mark.parametrize(
    ("placement", "online", "description"),
    [
        ({"preferred": "NOPE"}, MEMBERS, 'preferred server "NOPE" not known'),
        ({"preferred": "S0"}, MEMBERS, 'preferred server "S0" is already leader'),
        ({"preferred": "S1"}, ("S0", "S2"), "no replacement peer connected"),
        ({"cluster": "X"}, MEMBERS, "no replacement peer connected"),
        ({"tags": ["nope"]}, MEMBERS, "no replacement peer connected"),
        ({"tags": ["ssd"]}, ("S0", "S1"), "no replacement peer connected"),
    ],
)
def test_refusals_are_the_references(
    placement: dict[str, object], online: tuple[str, ...], description: str
) -> None:
    with pytest.raises(ApiError) as err:
        target({"placement": placement}, online)
    assert err.value.to_json() == {"code": 400, "err_code": 10005, "description": description}


def test_tags_and_cluster_pick_among_matching_members() -> None:
    assert target({"placement": {"tags": ["AZ:2", "ssd"]}}) == "S2"
    assert target({"placement": {"cluster": "C", "tags": ["az:2"]}}) in ("S1", "S2")
