"""A hub and a leaf joined by a leafnode link, for every pairing of the reference and
jetlake: each test runs with jetlake as the leaf of a reference hub, as the hub of a
reference leaf, on both ends, and (under soak, the baseline the others are held to)
the reference on both ends."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import free_port
from tests.support.http import _get
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server

PAIRS = [  # the reference on both ends is the baseline, checked under soak
    pytest.param(("nats-server", "nats-server"), id="ref-hub/ref-leaf", marks=pytest.mark.soak),
    pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf"),
    pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
    pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf"),
]
LINK_TIMEOUT = 10.0
_LEAF_PORT = re.compile(r"Listening for leafnode connections on \S+:(\d+)")


@dataclass
class Link:
    hub: ServerProcess
    leaf: ServerProcess
    leaf_port: int  # the hub's leafnode port


def hub_config(leaf_port: int, extra: str = "") -> str:
    return f"server_name: hub\nleafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n{extra}"


def leaf_config(leaf_port: int, remote: str = "", extra: str = "") -> str:
    return (
        "server_name: leaf\nleafnodes { reconnect: 1\n"
        f'  remotes [ {{ url: "nats://127.0.0.1:{leaf_port}" {remote} }} ] }}\n{extra}'
    )


def leaf_port(server: ServerProcess) -> int:
    """The leafnode port a server started with `listen: …:-1` took."""
    found = server.find_log(_LEAF_PORT)
    assert found is not None, f"{server.kind} did not log its leafnode port"
    return int(found.group(1))


def leafz(server: ServerProcess) -> dict[str, Any]:
    return dict(_get(server.http_url + "/leafz?subs=1").json())


def linked(server: ServerProcess) -> bool:
    return leafz(server)["leafnodes"] >= 1


def announced(server: ServerProcess) -> set[str]:
    """Subjects the remote end of `server`'s links announced to it."""
    return {s for leaf in leafz(server)["leafs"] for s in leaf.get("subscriptions_list", [])}


async def knows(server: ServerProcess, subject: str, *, present: bool = True) -> None:
    """Wait until `server` heard (or no longer has) the other end's interest in `subject`."""
    what = f"{server.kind} {'learning' if present else 'forgetting'} interest in {subject}"
    await asyncio.to_thread(
        poll, lambda: (subject in announced(server)) == present, what, LINK_TIMEOUT
    )


def start_link(hub_kind: str, leaf_kind: str, tmp: Path, *, remote: str = "") -> Link:
    port = free_port()
    hub = start_server(hub_kind, "-m", "-1", config=hub_config(port), tmp_path=tmp, name="hub")
    try:
        leaf = start_server(
            leaf_kind, "-m", "-1", config=leaf_config(port, remote), tmp_path=tmp, name="leaf"
        )
    except BaseException:
        hub.stop(expect_code=None)
        raise
    link = Link(hub, leaf, port)
    poll(lambda: linked(hub) and linked(leaf), "the leafnode link", LINK_TIMEOUT)
    return link


@pytest.fixture(scope="module", params=PAIRS)
def link(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Link]:
    """A shared hub and leaf; the leaf denies exporting `private.>` and importing
    `local.>`. Tests use their own subjects and leave no interest behind."""
    hub_kind, leaf_kind = request.param
    remote = ', deny_exports: ["private.>"], deny_imports: ["local.>"]'
    pair = start_link(hub_kind, leaf_kind, tmp_path_factory.mktemp("link"), remote=remote)
    yield pair
    pair.leaf.stop(expect_code=None)
    pair.hub.stop(expect_code=None)
