"""The WebSocket row: `nats bench pub` → `nats bench sub`, both over ``ws://``.

natscli's Go client speaks NATS over WebSocket when its URL says ``ws://``, so the row
is ``natscli-pub-sub`` with both clients on the server's `websocket {}` listener
instead of its TCP port: the difference between the two rows is what the framing
(the server unmasks every client frame and frames every delivery) costs. Both
servers get the same block, plain ``ws://`` on a free port; the subscriber's rate is
the figure.

The row runs as ``Profile.OFFLINE`` and starts its own server, the binary beside
this interpreter, as the leafnode row does: the listener has no command-line flag.

``mqtt_measure`` is the MQTT row over the same listener: aiomqtt (paho's
``websockets`` transport) publishing to an aiomqtt subscriber at QoS 0 and QoS 1, on a
server with `mqtt {}` and JetStream beside its `websocket {}` block.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from benchmarks import mqtt, natscli
from benchmarks.cluster.rows import COMMANDS, START_SECONDS
from benchmarks.model import Incomplete, Measure, Params
from benchmarks.servers import WEBSOCKET_LISTENING, configured_servers

CONFIG = "websocket { host: 127.0.0.1, port: -1, no_tls: true }\n"


def measure(side: str) -> Measure:
    """The harness's measure of the row on one side: a fresh server of that kind."""
    return partial(_measure, command=COMMANDS[side])


def websocket_url(log: Path) -> str:
    """The ``ws://`` URL the server logged for its listener; both servers log the same line."""
    found = WEBSOCKET_LISTENING.search(log.read_bytes())
    if found is None:
        raise Incomplete(f"{log.name} names no websocket listener")
    return found.group(1).decode()


async def _measure(_url: str, p: Params, *, command: list[str]) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    async with configured_servers(command, p.store, {"ws": CONFIG}, START_SECONDS) as servers:
        [(_, log)] = servers
        return await natscli.pub_sub(websocket_url(log), p)


def mqtt_measure(side: str) -> Measure:
    """The harness's measure of the MQTT-over-WebSocket row on one side."""
    return partial(_mqtt_measure, command=COMMANDS[side])


async def _mqtt_measure(_url: str, p: Params, *, command: list[str]) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    store = p.store / "mqtt-ws-js"
    config = f"{CONFIG}{mqtt.CONFIG}jetstream {{ store_dir: '{store}' }}\n"
    async with configured_servers(command, p.store, {"mqttws": config}, START_SECONDS) as servers:
        [(_, log)] = servers
        port = int(websocket_url(log).rpartition(":")[2])
        return {
            "qos0_msgs_per_s": await mqtt.ws_pub_sub(port, 0, p),
            "qos1_msgs_per_s": await mqtt.ws_pub_sub(port, 1, p),
        }
