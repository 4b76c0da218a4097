"""Which node of a new group stands for election at once (the rest wait their timeout)."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.server.jetstream.cluster.groups import stand_first


class Node:
    def __init__(self, term: int) -> None:
        self.term = term
        self.campaigns = 0

    def status(self) -> dict[str, Any]:
        return {"term": self.term}

    def campaign(self) -> None:
        self.campaigns += 1


@pytest.mark.parametrize(
    ("term", "voters", "stands"),
    [
        (0, ("S1", "S2", "S3"), True),  # brand new, and placement's first pick
        (0, ("S2", "S1", "S3"), False),  # brand new, another is first
        (3, ("S1", "S2", "S3"), False),  # has been in an election: waits its timeout
        (0, (), False),
    ],
)
def test_only_a_brand_new_groups_first_voter_stands_at_once(
    term: int, voters: tuple[str, ...], stands: bool
) -> None:
    node = Node(term)
    stand_first(node, voters, "S1")  # type: ignore[arg-type]
    assert node.campaigns == int(stands)
