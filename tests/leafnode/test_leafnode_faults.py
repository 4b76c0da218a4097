"""Links that must not form or must form again: two servers that are each other's leaf
(a loop), a leaf with wrong credentials, a hub that restarts under its leaf."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats
import pytest

from tests.conftest import KIND_IDS
from tests.leafnode.conftest import LINK_TIMEOUT, knows, leaf_config, leafz, linked, start_link
from tests.leafnode.relay import Relay
from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import start_server

KINDS = ["nats-server", "jetlake"]


@pytest.mark.parametrize(
    "other",
    ["jetlake", pytest.param("nats-server", marks=pytest.mark.soak)],
    ids=lambda k: KIND_IDS[k],
)
async def test_a_loop_is_refused(tmp_path: Path, other: str) -> None:
    """A jetlake server and another that dial each other: one hears its own loop
    detection subject back and the link is refused with the reference's error; the
    servers' own clients go on meanwhile."""
    ports = free_port(), free_port()
    configs = [
        (
            name,
            kind,
            f"server_name: {name}\nleafnodes {{ listen: 127.0.0.1:{listen}\n"
            f'  remotes [ {{ url: "nats://127.0.0.1:{dial}" }} ] }}\n',
        )
        for name, kind, listen, dial in (
            ("A", "jetlake", ports[0], ports[1]),
            ("B", other, ports[1], ports[0]),
        )
    ]
    with ThreadPoolExecutor(2) as pool:  # both at once: each dials the other until it is up
        servers = list(
            pool.map(
                lambda c: start_server(c[1], config=c[2], tmp_path=tmp_path, name=c[0]), configs
            )
        )
    try:
        poll(
            lambda: any(s.find_log("Loop detected for leafnode account") for s in servers),
            "a loop detected",
            LINK_TIMEOUT,
        )
        line = next(s.find_log(r"Loop detected .*") for s in servers if s.find_log("Loop detected"))
        assert line is not None
        assert 'account="$G". Delaying attempt to reconnect for 30s' in line.group(0)
        for server in servers:
            nc = await nats.connect(server.url, allow_reconnect=False)
            sub = await nc.subscribe("beside.the.loop")
            await nc.publish("beside.the.loop", b"undisturbed")
            assert (await sub.next_msg(5)).data == b"undisturbed"
            await nc.close()
    finally:
        for server in servers:
            server.stop(expect_code=None)


@pytest.mark.parametrize(
    ("hub_kind", "leaf_kind"),
    [("jetlake", "nats-server"), pytest.param("nats-server", "jetlake", marks=pytest.mark.soak)],
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


@pytest.mark.parametrize(
    ("hub_kind", "leaf_kind"),
    [
        ("jetlake", "nats-server"),
        pytest.param("jetlake", "jetlake", marks=pytest.mark.soak),
        pytest.param("nats-server", "jetlake", marks=pytest.mark.soak),
    ],
    ids=["jl-hub/ref-leaf", "jl-hub/jl-leaf", "ref-hub/jl-leaf"],
)
async def test_a_leaf_back_from_a_silent_cut_replaces_its_stale_link(
    tmp_path: Path, hub_kind: str, leaf_kind: str
) -> None:
    """The leaf's network went away without closing the hub's end: when the leaf dials
    again, the hub drops the stale link rather than sending everything twice."""
    hub_port, relay_port = free_port(), free_port()
    relay = Relay(relay_port, hub_port)
    await relay.start()
    hub = start_server(
        hub_kind,
        "-m",
        "-1",
        config=f"server_name: hub\nleafnodes {{ listen: 127.0.0.1:{hub_port} }}\n",
        tmp_path=tmp_path,
        name="hub",
    )
    config = leaf_config(relay_port).replace("reconnect: 1", 'reconnect: "250ms"')
    leaf = start_server(leaf_kind, "-m", "-1", config=config, tmp_path=tmp_path, name="leaf")
    try:
        await asyncio.to_thread(poll, lambda: linked(hub) and linked(leaf), "link", LINK_TIMEOUT)
        await relay.cut(silently=True)
        await asyncio.to_thread(poll, lambda: not linked(leaf), "the link lost", LINK_TIMEOUT)
        assert linked(hub)  # the hub still holds the link, unaware
        await relay.start()
        replaced = "Replacing connection from same server"
        await asyncio.to_thread(hub.wait_for_log, replaced, timeout=LINK_TIMEOUT)
        one = lambda: linked(leaf) and leafz(hub)["leafnodes"] == 1  # noqa: E731
        await asyncio.to_thread(poll, one, "one link", LINK_TIMEOUT)
        hub_nc = await nats.connect(hub.url)
        leaf_nc = await nats.connect(leaf.url)
        sub = await leaf_nc.subscribe("once")
        fence = await leaf_nc.subscribe("fence")
        await leaf_nc.flush()
        await knows(hub, "fence")
        await hub_nc.publish("once", b"1")
        await hub_nc.publish("fence", b"")
        await fence.next_msg(5)
        assert [(await sub.next_msg(1)).data] == [b"1"]
        assert sub.pending_msgs == 0
        await hub_nc.close()
        await leaf_nc.close()
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


@pytest.mark.parametrize(
    "leaf_kind",
    ["jetlake", pytest.param("nats-server", marks=pytest.mark.soak)],
    ids=lambda k: KIND_IDS[k] + "-leaf",
)
def test_a_leaf_dialling_a_client_port_gives_up_on_it(tmp_path: Path, leaf_kind: str) -> None:
    """A remote that names a client port: its INFO is not a leafnode port's."""
    plain = start_server("nats-server", tmp_path=tmp_path, name="plain")
    leaf = start_server(leaf_kind, config=leaf_config(plain.port), tmp_path=tmp_path, name="leaf")
    try:
        leaf.wait_for_log("attempted to connect to wrong port", timeout=LINK_TIMEOUT)
    finally:
        leaf.stop(expect_code=None)
        plain.stop(expect_code=None)
