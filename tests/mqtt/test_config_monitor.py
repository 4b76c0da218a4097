"""`mqtt {}` configuration errors and what monitoring shows, against the reference's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ingest.server.options import ConfigError, load_config, validate_options
from ingest.server.settings import MQTTConfig
from tests.mqtt.conftest import Connect, StartMQTT, next_message
from tests.support.http import get_json
from tests.support.servers import server_command
from tests.support.tls import make_pki


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        (
            "mqtt { port: -1 }\n",
            [],
            "mqtt requires JetStream to be enabled if running in standalone mode",
        ),
        ("mqtt {\n  port: -1\n  bogus: 1\n}\n", ["-js"], ':3:3: unknown field "bogus"'),
        ("mqtt { port: -1, max_ack_pending: 70000 }\n", ["-js"], "should in [0..65535] range"),
        (
            "cluster { port: -1 }\nmqtt { port: -1 }\n",
            ["-js"],
            "mqtt requires server name to be explicitly set",
        ),
        (
            "authorization { users: [{user: a, password: b}] }\n"
            "mqtt { port: -1, authorization { username: x, password: y } }\n",
            ["-js"],
            "mqtt authentication username not compatible with presence of users/nkeys",
        ),
        (  # an account's users count as the server's
            "accounts { A { users: [{user: a, password: b}] } }\n"
            "mqtt { port: -1, authorization { username: x, password: y } }\n",
            ["-js"],
            "mqtt authentication username not compatible with presence of users/nkeys",
        ),
    ],
)
def test_config_errors(
    server_kind: str, tmp_path: Path, config: str, flags: list[str], message: str
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(config)
    argv = [*server_command(server_kind), "-c", str(conf), "-p", "-1", "-sd", str(tmp_path), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 1
    assert message in done.stderr


def test_no_auth_user_may_name_an_accounts_user(tmp_path: Path) -> None:
    """Pure: as the top level's, mqtt's and websocket's no_auth_user may name a user of
    an account block (the reference starts; the anonymous MQTT client lands in APP)."""
    conf = tmp_path / "server.conf"
    conf.write_text(
        'jetstream { store_dir: "js" }\n'
        "accounts { APP { jetstream: enabled, users: [{user: app, password: pw}] } }\n"
        "mqtt { port: -1, no_auth_user: app }\n"
        "websocket { port: -1, no_tls: true, no_auth_user: app }\n"
    )
    opts = load_config(str(conf))
    validate_options(opts)  # as at start
    assert opts.mqtt is not None and opts.mqtt.no_auth_user == "app"
    assert opts.websocket is not None and opts.websocket.no_auth_user == "app"
    # A listener's own username beside them is refused, as the reference refuses it.
    auth = "authorization { username: x, password: y }"
    conf.write_text(
        conf.read_text().replace("no_tls: true, no_auth_user: app", f"no_tls: true, {auth}")
    )
    with pytest.raises(ConfigError, match="websocket authentication username not compatible"):
        validate_options(load_config(str(conf)))


async def test_varz_mqtt_block(start_mqtt: StartMQTT) -> None:
    server = start_mqtt('ack_wait: "10s"\n  max_ack_pending: 50', "", "-m", "-1")
    varz = await get_json(server.process.http_url + "/varz")
    assert varz["mqtt"] == {
        "host": "0.0.0.0",  # the MQTT port does not follow -a
        "port": server.mqtt_port,
        "tls_timeout": 2,
        "ack_wait": 10_000_000_000,
        "max_ack_pending": 50,
    }


async def test_connz_lists_mqtt_clients(start_mqtt: StartMQTT, mqtt_client: Connect) -> None:
    server = start_mqtt("", "", "-m", "-1")
    client = await mqtt_client(server, identifier="meter-7")
    await client.subscribe("m/#", qos=1)
    connz = await get_json(server.process.http_url + "/connz?subs=1")
    (conn,) = connz["connections"]
    assert (conn["type"], conn["kind"], conn["mqtt_client"]) == ("mqtt", "Client", "meter-7")
    subjects = conn["subscriptions_list"]
    assert {"m.>", "m"} <= set(subjects)
    assert sum(s.startswith("$MQTT.sub.") for s in subjects) == 2


async def test_mqtt_over_tls(start_mqtt: StartMQTT, mqtt_client: Connect, tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    server = start_mqtt(f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}" }}')
    ctx = pki.client_context()
    ctx.check_hostname = False
    client = await mqtt_client(server, identifier="tls", tls_context=ctx)
    await client.subscribe("s/t")
    await client.publish("s/t", b"sealed")
    assert (await next_message(client)).payload == b"sealed"


def test_mqtt_block_is_read_with_the_reference_keys(tmp_path: Path) -> None:
    conf = tmp_path / "m.conf"
    conf.write_text(
        "mqtt {\n  listen: 127.0.0.1:1999\n  ackwait: 5s\n  max_inflight: 7\n"
        '  consumer_auto_cleanup: "1m"\n  api_timeout: 2s\n  stream_replicas: 1\n'
        "  consumer_memory_storage: true\n  no_auth_user: u\n"
        "  authorization { user: a, password: b, timeout: 3 }\n}\n"
    )
    assert load_config(str(conf)).mqtt == MQTTConfig(
        host="127.0.0.1", port=1999, ack_wait=5.0, max_ack_pending=7,
        consumer_inactive_threshold=60.0, js_api_timeout=2.0, stream_replicas=1,
        consumer_memory_storage=True, no_auth_user="u", username="a", password="b",
        auth_timeout=3.0,
    )  # fmt: skip
    conf.write_text("mqtt { host: 127.0.0.1 }\n")  # no port: no MQTT, as the reference
    assert load_config(str(conf)).mqtt is None
