"""Leader stepdowns with a placement hand leadership where asked, on both servers.

Raw requests (`nc.request`), so the answers compare byte for byte with the
reference's: a preferred member takes over; an unknown one, the leader itself,
or a cluster or tags no other member matches are refused with err_code 10005
and the reference's descriptions. Stream, consumer (jetlake's consumer leader is
its stream's leader) and meta group (as the system account).
"""

from __future__ import annotations

import json

import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig

from tests.jscluster.support import connect, eventually, js_cluster, request, server_name
from tests.jscluster.test_kv_consumers_e2e import ACCOUNTS
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(150), pytest.mark.parametrize("kind", enabled_kinds())]

PREFIX = "io.nats.jetstream.api.v1."


def placed(**placement: str | list[str]) -> bytes:
    return json.dumps({"placement": placement}).encode()


def refused(kind: str, description: str) -> dict[str, object]:
    error = {"code": 400, "err_code": 10005, "description": description}
    return {"type": PREFIX + kind, "error": error}


async def stepdown(nc: Client, subject: str, body: bytes) -> dict[str, object]:
    """Asked again while the group has no leader yet (a timeout or 10008)."""

    async def answer() -> dict[str, object] | None:
        doc = await request(nc, subject, body)
        return None if doc.get("error", {}).get("err_code") == 10008 else doc

    return await eventually(answer, f"an answer to {subject}")


async def test_stream_and_consumer_stepdown_to_a_preferred_server(
    kind: str, tmp_path: object
) -> None:
    async with js_cluster(kind, tmp_path, config=ACCOUNTS, user="app", password="pass") as c:
        await c.add_stream("S", ["s.>"])
        await c.js.add_consumer(
            "S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT)
        )
        subject = "$JS.API.STREAM.LEADER.STEPDOWN.S"
        kind_doc = "stream_leader_stepdown_response"
        info = await c.js.stream_info("S")
        assert info.cluster is not None and info.cluster.replicas
        old = info.cluster.leader
        wanted = sorted(r.name for r in info.cluster.replicas)[-1]
        done = await stepdown(c.nc, subject, placed(preferred=wanted))
        assert done == {"type": PREFIX + kind_doc, "success": True}

        async def stream_led_by(name: str) -> bool:
            now = await c.js.stream_info("S")
            return now.cluster is not None and now.cluster.leader == name

        await eventually(lambda: stream_led_by(wanted), f"{wanted} leading S (was {old})")
        assert await stepdown(c.nc, subject, placed(preferred="NOPE")) == refused(
            kind_doc, 'preferred server "NOPE" not known'
        )
        assert await stepdown(c.nc, subject, placed(preferred=wanted)) == refused(
            kind_doc, f'preferred server "{wanted}" is already leader'
        )
        for body in (placed(cluster="X"), placed(tags=["nope"])):
            assert await stepdown(c.nc, subject, body) == refused(
                kind_doc, "no replacement peer connected"
            )

        consumer_subject = "$JS.API.CONSUMER.LEADER.STEPDOWN.S.C"
        consumer_doc = "consumer_leader_stepdown_response"
        cinfo = await eventually(lambda: c.js.consumer_info("S", "C"), "consumer C")
        assert cinfo.cluster is not None and cinfo.cluster.replicas
        target = sorted(r.name for r in cinfo.cluster.replicas)[0]
        done = await stepdown(c.nc, consumer_subject, placed(preferred=target))
        assert done == {"type": PREFIX + consumer_doc, "success": True}

        async def consumer_led_by(name: str) -> bool:
            now = await c.js.consumer_info("S", "C")
            return now.cluster is not None and now.cluster.leader == name

        await eventually(lambda: consumer_led_by(target), f"{target} leading C")
        assert await stepdown(c.nc, consumer_subject, placed(preferred="NOPE")) == refused(
            consumer_doc, 'preferred server "NOPE" not known'
        )


async def test_meta_stepdown_to_a_preferred_server(kind: str, tmp_path: object) -> None:
    async with js_cluster(kind, tmp_path, config=ACCOUNTS, user="app", password="pass") as c:
        sys = await connect(c.servers, user="sys", password="pass")
        try:

            async def meta_leader() -> str | None:
                doc = await request(sys, "$SYS.REQ.SERVER.PING.JSZ")
                return doc["data"].get("meta_cluster", {}).get("leader")

            old = await eventually(meta_leader, "a meta leader")
            subject = "$JS.API.META.LEADER.STEPDOWN"
            kind_doc = "meta_leader_stepdown_response"
            assert await stepdown(sys, subject, placed(preferred="NOPE")) == refused(
                kind_doc, 'preferred server "NOPE" not known'
            )
            assert await stepdown(sys, subject, placed(preferred=old)) == refused(
                kind_doc, f'preferred server "{old}" is already leader'
            )
            wanted = sorted(server_name(s) for s in c.servers if server_name(s) != old)[-1]
            done = await stepdown(sys, subject, placed(preferred=wanted))
            assert done == {"type": PREFIX + kind_doc, "success": True}

            async def moved() -> bool:
                return await meta_leader() == wanted

            await eventually(moved, f"{wanted} leading the meta group (was {old})")
        finally:
            await sys.close()
