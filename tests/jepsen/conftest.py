"""The fixtures every fault test shares: a lab of namespaces and one server kind in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import KIND_IDS, print_logs_if_failed
from tests.jepsen.cluster import NodeSet, start_nodes
from tests.support.netns import NetLab, leftovers, netlab
from tests.support.servers import enabled_kinds

NODES = 3


@pytest.fixture
def lab() -> Iterator[NetLab]:
    with netlab(NODES) as built:
        yield built
    assert leftovers([built]) == [], "namespaces or links outlived the test"


@pytest.fixture(params=enabled_kinds(), ids=lambda kind: KIND_IDS[kind])
def nodes(request: pytest.FixtureRequest, lab: NetLab, tmp_path: Path) -> Iterator[NodeSet]:
    """jetlake's nodes can also lose their unsynced writes (see faults.PORTABLE_KINDS)."""
    kind = str(request.param)
    started = start_nodes(kind, lab, tmp_path, power_loss=kind == "jetlake")
    yield started
    started.stop()
    print_logs_if_failed(request, started.servers)
