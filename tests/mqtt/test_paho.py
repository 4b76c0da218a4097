"""paho-mqtt's own client (sync API, network loop in its thread) against both servers."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

from tests.mqtt.conftest import TIMEOUT, MQTTServer


class Paho:
    """A connected paho client whose messages land in a queue, read with a deadline."""

    def __init__(self, server: MQTTServer, client_id: str, will: tuple[str, bytes] | None) -> None:
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self._connected = threading.Event()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id)
        self.client.on_message = lambda _c, _u, msg: self.messages.put(msg)
        self.client.on_connect = self._on_connect
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1)
        self.client.connect("127.0.0.1", server.mqtt_port, keepalive=30)
        self.client.loop_start()
        assert self._connected.wait(TIMEOUT), f"{client_id}: no CONNACK"

    def _on_connect(self, _c: Any, _u: Any, _flags: Any, reason: Any, _p: Any) -> None:
        if not reason.is_failure:
            self._connected.set()

    def subscribe(self, topic: str, qos: int) -> None:
        done = threading.Event()
        self.client.on_subscribe = lambda *_: done.set()
        self.client.subscribe(topic, qos)
        assert done.wait(TIMEOUT), f"no SUBACK for {topic}"

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False) -> None:
        self.client.publish(topic, payload, qos, retain).wait_for_publish(TIMEOUT)

    def next(self) -> paho.MQTTMessage:
        return self.messages.get(timeout=TIMEOUT)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@contextmanager
def paho_clients(server: MQTTServer) -> Iterator[Any]:
    opened: list[Paho] = []

    def open_(client_id: str, will: tuple[str, bytes] | None = None) -> Paho:
        client = Paho(server, client_id, will)
        opened.append(client)
        return client

    try:
        yield open_
    finally:
        for client in opened:
            client.close()


def test_qos1_publish_subscribe(mqtt_server: MQTTServer) -> None:
    with paho_clients(mqtt_server) as open_:
        sub = open_("paho-sub")
        sub.subscribe("paho/q1/+", 1)
        pub = open_("paho-pub")
        for n in range(3):
            pub.publish(f"paho/q1/{n}", b"m%d" % n, qos=1)  # waits for the PUBACK
        got = [sub.next() for _ in range(3)]
        assert [(m.topic, m.payload, m.qos) for m in got] == [
            (f"paho/q1/{n}", b"m%d" % n, 1) for n in range(3)
        ]


def test_retained_message_reaches_a_late_subscriber(mqtt_server: MQTTServer) -> None:
    with paho_clients(mqtt_server) as open_:
        pub = open_("paho-retainer")
        pub.publish("paho/retained", b"kept", qos=1, retain=True)
        sub = open_("paho-late")
        sub.subscribe("paho/retained", 1)
        msg = sub.next()
        assert (msg.topic, msg.payload, msg.retain, msg.qos) == ("paho/retained", b"kept", 1, 1)
        pub.publish("paho/retained", b"", qos=1, retain=True)  # empty: deletes it
        assert sub.next().payload == b""
        later = open_("paho-later")
        later.subscribe("paho/retained", 1)
        later.subscribe("paho/retained-end", 0)
        later.publish("paho/retained-end", b"end")
        assert later.next().topic == "paho/retained-end"  # nothing retained came first


def test_will_is_published_when_the_connection_drops(mqtt_server: MQTTServer) -> None:
    with paho_clients(mqtt_server) as open_:
        watcher = open_("paho-watcher")
        watcher.subscribe("paho/will/#", 1)
        polite = open_("paho-polite", will=("paho/will/polite", b"gone"))
        polite.close()  # DISCONNECT: no Will
        rude = open_("paho-rude", will=("paho/will/rude", b"gone"))
        rude.client.loop_stop()
        rude.client.socket().close()  # no DISCONNECT: the Will goes out
        msg = watcher.next()
        assert (msg.topic, msg.payload, msg.qos) == ("paho/will/rude", b"gone", 1)
