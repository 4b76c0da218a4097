"""Links that must not form or must form again: two servers that are each other's leaf
(a loop), a leaf with wrong credentials, a hub that restarts under its leaf."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from tests.conftest import KIND_IDS
from tests.leafnode.conftest import LINK_TIMEOUT, knows, leaf_config, linked, start_link
from tests.support.cluster import free_port, poll
from tests.support.servers import start_server

KINDS = ["nats-server", "jetlake"]


@pytest.mark.parametrize("other", KINDS, ids=lambda k: KIND_IDS[k])
def test_a_loop_is_refused(tmp_path: Path, other: str) -> None:
    """A jetlake server and another that dial each other: one hears its own loop
    detection subject back and the link is refused with the reference's error."""
    ports = free_port(), free_port()
    servers = []
    for name, kind, listen, dial in (
        ("A", "jetlake", ports[0], ports[1]),
        ("B", other, *ports[::-1]),
    ):
        config = (
            f"server_name: {name}\nleafnodes {{ listen: 127.0.0.1:{listen}\n"
            f'  remotes [ {{ url: "nats://127.0.0.1:{dial}" }} ] }}\n'
        )
        servers.append(start_server(kind, config=config, tmp_path=tmp_path, name=name))
    try:
        poll(
            lambda: any(s.find_log("Loop detected for leafnode account") for s in servers),
            "a loop detected",
            LINK_TIMEOUT,
        )
        line = next(s.find_log(r"Loop detected .*") for s in servers if s.find_log("Loop detected"))
        assert line is not None
        assert 'account="$G". Delaying attempt to reconnect for 30s' in line.group(0)
    finally:
        for server in servers:
            server.stop(expect_code=None)


@pytest.mark.parametrize(
    ("hub_kind", "leaf_kind"),
    [("jetlake", "nats-server"), ("nats-server", "jetlake")],
    ids=["jl-hub/ref-leaf", "ref-hub/jl-leaf"],
)
def test_wrong_credentials_are_refused(tmp_path: Path, hub_kind: str, leaf_kind: str) -> None:
    port = free_port()
    hub = start_server(
        hub_kind,
        "-m",
        "-1",
        config=(
            "server_name: hub\n"
            f"leafnodes {{ listen: 127.0.0.1:{port}\n"
            "  authorization { user: edge, password: right } }\n"
        ),
        tmp_path=tmp_path,
        name="hub",
    )
    wrong = leaf_config(port).replace("nats://", "nats://edge:wrong@")
    leaf = start_server(leaf_kind, "-m", "-1", config=wrong, tmp_path=tmp_path, name="leaf")
    try:
        leaf.wait_for_log("Authorization Violation", timeout=LINK_TIMEOUT)
        hub.wait_for_log('authentication error - User "edge"', timeout=LINK_TIMEOUT)
        assert not linked(hub)
        leaf.stop(expect_code=None)
        right = leaf_config(port).replace("nats://", "nats://edge:right@")
        leaf = start_server(leaf_kind, "-m", "-1", config=right, tmp_path=tmp_path, name="leaf2")
        poll(lambda: linked(hub) and linked(leaf), "the authenticated link", LINK_TIMEOUT)
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


@pytest.mark.soak  # the default run redials through a cut relay (test_domains)
@pytest.mark.parametrize("hub_kind", KINDS, ids=lambda k: KIND_IDS[k] + "-hub")
async def test_the_leaf_redials_a_restarted_hub(tmp_path: Path, hub_kind: str) -> None:
    link = start_link(hub_kind, "jetlake", tmp_path)
    try:
        link.hub.stop(expect_code=None)
        poll(lambda: not linked(link.leaf), "the leaf noticing the hub is gone", LINK_TIMEOUT)
        link.hub.restart()
        poll(lambda: linked(link.hub) and linked(link.leaf), "the link again", LINK_TIMEOUT)
        hub = await nats.connect(link.hub.url, allow_reconnect=False)
        leaf = await nats.connect(link.leaf.url, allow_reconnect=False)
        sub = await hub.subscribe("after.restart")
        await hub.flush()
        await knows(link.leaf, "after.restart")
        await leaf.publish("after.restart", b"again")
        assert (await sub.next_msg(5)).data == b"again"
        await hub.close()
        await leaf.close()
    finally:
        link.leaf.stop(expect_code=None)
        link.hub.stop(expect_code=None)
