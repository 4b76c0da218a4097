"""A link bound to a named account: on the hub, leafs that log in as the leafnode user
land in its account and only that account's clients exchange messages with them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from tests.leafnode.conftest import LINK_TIMEOUT, Link, knows, leaf_config, leafz, linked
from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import start_server

HUB = """server_name: hub
accounts {{
  EDGE {{ users [ {{ user: app, password: app }} ] }}
  OTHER {{ users [ {{ user: other, password: other }} ] }}
}}
leafnodes {{
  listen: 127.0.0.1:{port}
  authorization {{ user: leaf, password: pw, account: EDGE }}
}}
"""


@pytest.fixture(
    params=[
        pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
        pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf", marks=pytest.mark.soak),
        pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf", marks=pytest.mark.soak),
    ]
)
def bound(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Link]:
    hub_kind, leaf_kind = request.param
    port = free_port()
    hub = start_server(
        hub_kind, "-m", "-1", config=HUB.format(port=port), tmp_path=tmp_path, name="hub"
    )
    config = leaf_config(port).replace("nats://", "nats://leaf:pw@")
    leaf = start_server(leaf_kind, "-m", "-1", config=config, tmp_path=tmp_path, name="leaf")
    try:
        poll(lambda: linked(hub) and linked(leaf), "the link", LINK_TIMEOUT)
        yield Link(hub, leaf, port)
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


async def test_only_the_bound_account_reaches_the_leaf(bound: Link) -> None:
    assert leafz(bound.hub)["leafs"][0]["account"] == "EDGE"
    host = f"127.0.0.1:{bound.hub.port}"
    app = await nats.connect(f"nats://app:app@{host}")
    other = await nats.connect(f"nats://other:other@{host}")
    leaf = await nats.connect(bound.leaf.url)
    at_app = await app.subscribe("acc.x")
    at_other = await other.subscribe("acc.x")
    at_leaf = await leaf.subscribe("acc.y")
    for nc in (app, other, leaf):
        await nc.flush()
    await knows(bound.leaf, "acc.x")
    await knows(bound.hub, "acc.y")
    await leaf.publish("acc.x", b"to EDGE")
    assert (await at_app.next_msg(5)).data == b"to EDGE"
    await other.flush()
    assert at_other.pending_msgs == 0
    await other.publish("acc.y", b"from OTHER: stays there")
    await app.publish("acc.y", b"from EDGE")
    assert (await at_leaf.next_msg(5)).data == b"from EDGE"
    for nc in (app, other, leaf):
        await nc.close()


USERS_HUB = """server_name: hub
accounts {{ EDGE {{}}, OTHER {{}} }}
leafnodes {{
  listen: 127.0.0.1:{port}
  authorization {{ users [
    {{ user: e, password: pe, account: EDGE }}
    {{ user: o, password: po, account: OTHER }}
  ] }}
}}
"""
USERS_LEAF = """server_name: leaf
accounts {{ SECOND {{}} }}
leafnodes {{ reconnect: 1, remotes [
  {{ url: "nats://o:po@127.0.0.1:{port}" }}
  {{ url: "nats://e:wrong@127.0.0.1:{port}", account: SECOND }}
] }}
"""


@pytest.mark.parametrize(
    "hub_kind",
    [
        pytest.param("jetlake", id="jl"),
        pytest.param("nats-server", id="ref", marks=pytest.mark.soak),
    ],
)
def test_a_leafnode_user_list_binds_each_user_to_its_account(hub_kind: str, tmp_path: Path) -> None:
    """`leafnodes { authorization { users [...] } }`: a leaf logging in as `o` lands in
    OTHER; one with a wrong password is refused (a reference leaf on both hubs)."""
    port = free_port()
    hub = start_server(
        hub_kind, "-m", "-1", config=USERS_HUB.format(port=port), tmp_path=tmp_path, name="hub"
    )
    try:
        leaf = start_server(
            "nats-server",
            "-m",
            "-1",
            config=USERS_LEAF.format(port=port),
            tmp_path=tmp_path,
            name="leaf",
        )
        try:
            poll(lambda: linked(hub), "the link", LINK_TIMEOUT)
            leaf.wait_for_log("Authorization Violation", timeout=LINK_TIMEOUT)
            assert [link["account"] for link in leafz(hub)["leafs"]] == ["OTHER"]
        finally:
            leaf.stop(expect_code=None)
    finally:
        hub.stop(expect_code=None)
