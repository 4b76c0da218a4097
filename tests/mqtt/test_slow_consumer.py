"""An MQTT subscriber that stops reading is cut off as a slow consumer once the server
holds more than `max_pending` for it, as a NATS client is, and its Will goes out;
everyone else goes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import nats

from ingest.parser import mqtt
from tests.mqtt.conftest import MQTTServer, RawMQTT, StartMQTT

OpenRaw = Callable[[MQTTServer], Awaitable[RawMQTT]]
PAYLOAD = b"x" * 60_000


async def test_a_subscriber_that_stops_reading_is_cut_off(
    start_mqtt: StartMQTT, open_raw: OpenRaw
) -> None:
    server = start_mqtt("", "max_pending: 65536\nmax_payload: 65536")
    slow = await open_raw(server)
    slow.send(mqtt.Connect("slow", True, 0, mqtt.Will(b"will/slow", b"gone", 0, False)))
    assert await slow.packet() == mqtt.ConnAck(False, 0)
    slow.send(mqtt.Subscribe(1, ((b"flood", 0),)))
    assert await slow.packet() == mqtt.SubAck(1, (0,))
    nc = await nats.connect(server.process.url)
    try:
        beside = await nc.subscribe("beside")
        will = await nc.subscribe("will.slow")
        await nc.flush()
        for _ in range(400):  # 24 MB the slow subscriber never reads
            await nc.publish("flood", PAYLOAD)
            if server.process.find_log("Slow Consumer Detected"):
                break
        await nc.flush()
        server.process.wait_for_log(
            r'\[INF\] 127\.0\.0\.1:\d+ - mid:\d+ - "slow" - '
            r"Slow Consumer Detected: MaxPending of 65536 Exceeded",
            timeout=10,
        )
        assert await slow.closed()
        assert (await will.next_msg(5)).data == b"gone"  # not the client's choice
        await nc.publish("beside", b"undisturbed")
        assert (await beside.next_msg(5)).data == b"undisturbed"
    finally:
        await nc.close()
