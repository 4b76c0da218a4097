"""Leafnode links over TLS: the hub's `leafnodes { tls {} }` and a remote's `tls {}` with
a tls:// URL, verified both ways, in the pairings with the reference; a certificate
from another CA refused by either end, logged naming the peer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest

from tests.leafnode.conftest import LINK_TIMEOUT, leafz, linked
from tests.support.cluster import free_port
from tests.support.http import _get
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server
from tests.support.tls import Pki

pytestmark = pytest.mark.timeout(60)

PAIRS = [  # jetlake with the reference by default; the rest under soak
    pytest.param(("nats-server", "nats-server"), id="ref-hub/ref-leaf", marks=pytest.mark.soak),
    pytest.param(("nats-server", "jetlake"), id="ref-hub/jl-leaf"),
    pytest.param(("jetlake", "nats-server"), id="jl-hub/ref-leaf"),
    pytest.param(("jetlake", "jetlake"), id="jl-hub/jl-leaf", marks=pytest.mark.soak),
]


def tls_block(pki: Pki, *, ca: Pki | None = None, verify: bool = False) -> str:
    """The route certificate serves both sides (a leaf presents it as a TLS client)."""
    return (
        f'tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}", '
        f'ca_file: "{(ca or pki).ca_cert}", verify: {str(verify).lower()}, timeout: 2 }}'
    )


def start_pair(
    hub_kind: str, leaf_kind: str, tmp: Path, hub_tls: str, leaf_tls: str
) -> tuple[ServerProcess, ServerProcess]:
    port = free_port()
    hub = start_server(
        hub_kind,
        "-m",
        "-1",
        config=f"server_name: hub\nleafnodes {{ listen: 127.0.0.1:{port}\n  {hub_tls} }}\n",
        tmp_path=tmp,
        name="hub",
    )
    try:
        leaf = start_server(
            leaf_kind,
            "-m",
            "-1",
            config=(
                "server_name: leaf\nleafnodes { reconnect: 1\n"
                f'  remotes [ {{ urls: ["tls://127.0.0.1:{port}"]\n    {leaf_tls} }} ] }}\n'
            ),
            tmp_path=tmp,
            name="leaf",
        )
    except BaseException:
        hub.stop(expect_code=None)
        raise
    return hub, leaf


async def crosses(publisher: ServerProcess, subscriber: ServerProcess, subject: str) -> None:
    """A message published at one end reaches a subscriber at the other."""
    sub_nc = await nats.connect(subscriber.url)
    pub_nc = await nats.connect(publisher.url)
    try:
        sub = await sub_nc.subscribe(subject)
        await sub_nc.flush()
        await asyncio.to_thread(
            poll,
            lambda: (
                subject
                in {
                    s
                    for leaf in leafz(publisher)["leafs"]
                    for s in leaf.get("subscriptions_list", [])
                }
            ),
            f"{publisher.kind} learning interest in {subject}",
            LINK_TIMEOUT,
        )
        await pub_nc.publish(subject, b"over tls", headers={"k": "v"})
        msg = await sub.next_msg(timeout=5)
        assert (msg.data, msg.headers) == (b"over tls", {"k": "v"})
    finally:
        await pub_nc.close()
        await sub_nc.close()


@pytest.mark.parametrize("kinds", PAIRS)
async def test_a_leafnode_link_runs_over_verified_tls(
    kinds: tuple[str, str], pki: Pki, tmp_path: Path
) -> None:
    hub, leaf = start_pair(*kinds, tmp_path, tls_block(pki, verify=True), tls_block(pki))
    try:
        poll(lambda: linked(hub) and linked(leaf), "the TLS leafnode link", LINK_TIMEOUT)
        await crosses(leaf, hub, "tls.up")
        await crosses(hub, leaf, "tls.down")
        leaf_block = _get(hub.http_url + "/varz").json()["leaf"]
        assert (leaf_block["tls_required"], leaf_block["tls_verify"]) == (True, True)
        assert leaf_block["tls_timeout"] == 2
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


def test_a_hub_refuses_a_leaf_certificate_from_another_ca(
    pki: Pki, other_pki: Pki, tmp_path: Path
) -> None:
    """A reference leaf trusting the hub but presenting another CA's certificate: the
    jetlake hub (verify) logs the failed handshake naming the leaf's address."""
    hub, leaf = start_pair(
        "jetlake",
        "nats-server",
        tmp_path,
        tls_block(pki, verify=True),
        tls_block(other_pki, ca=pki),
    )
    try:
        hub.wait_for_log(
            r"127\.0\.0\.1:\d+ - lid:\d+ - TLS leafnode handshake error: certificate verify failed"
        )
        hub.wait_for_log("Leafnode connection closed: TLS Handshake Failure")
        assert not linked(hub)
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)


def test_a_leaf_refuses_a_hub_certificate_from_another_ca(
    pki: Pki, other_pki: Pki, tmp_path: Path
) -> None:
    """A jetlake leaf trusting only its own CA refuses a reference hub's certificate
    signed by another, naming the hub's address."""
    hub, leaf = start_pair("nats-server", "jetlake", tmp_path, tls_block(other_pki), tls_block(pki))
    try:
        leaf.wait_for_log(
            r"127\.0\.0\.1:\d+ - lid:\d+ - TLS leafnode handshake error: certificate verify failed"
        )
        assert not linked(leaf)
    finally:
        leaf.stop(expect_code=None)
        hub.stop(expect_code=None)
