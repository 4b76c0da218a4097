"""WebSocket end to end against both servers: the upgrade, frames, NATS and MQTT inside."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.conftest import Connect, MakeServer, ServerPool
from tests.support.http import get_json
from tests.support.servers import server_command
from tests.support.tls import Pki
from tests.websocket.conftest import TIMEOUT, OpenWS, WSServer, ws_port

NODE_TOOLS = Path(__file__).resolve().parents[2] / ".venv" / "node"


CONFIGURED = """
websocket {
  port: -1, no_tls: true, compression: true, handshake_timeout: "3s"
  allowed_origins: ["http://a.example"]
  authorization { user: web, password: pw, timeout: 1 }
}
"""


@pytest.fixture
def configured(server_kind: str, server_pool: ServerPool) -> WSServer:
    """A server with every option a browser deployment sets (shared by the tests below)."""
    server = server_pool.get(server_kind, "-m", "-1", config=CONFIGURED)
    return WSServer(server, ws_port(server))


async def test_varz_block(configured: WSServer) -> None:
    varz = await get_json(f"{configured.process.http_url}/varz")
    assert varz["websocket"] == {
        "host": "0.0.0.0",
        "port": configured.port,
        "handshake_timeout": 3_000_000_000,
        "auth_timeout": 1,
        "no_tls": True,
        "allowed_origins": ["http://a.example"],
        "compression": True,
    }


def test_refused_without_tls(server_kind: str, tmp_path: Path) -> None:
    path = tmp_path / "ws.conf"
    path.write_text("websocket { port: -1 }")
    done = subprocess.run(
        [*server_command(server_kind), "-c", str(path)], capture_output=True, text=True, timeout=20
    )
    assert done.returncode != 0
    assert "websocket requires TLS configuration" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("request_text", "status"),
    [
        ("POST / HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n\r\n",
            400,
        ),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
            400,
        ),
    ],
    ids=["post", "no-upgrade", "bad-key", "old-version"],
)
async def test_handshake_refused(ws_server: WSServer, request_text: str, status: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", ws_server.port)
    writer.write(request_text.encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
    assert int(head.split(b" ")[1]) == status
    writer.close()


async def test_auth_timeout(configured: WSServer, open_ws: OpenWS) -> None:
    """The block's own authentication timeout: -ERR, then a close frame saying why."""
    ws = await open_ws(configured.port)
    data = await ws.read_data(b"-ERR")
    assert b"-ERR 'Authentication Timeout'" in data
    assert await ws.closed() == (1008, b"Authentication Timeout")


async def test_origin_checks(configured: WSServer, open_ws: OpenWS) -> None:
    port = configured.port
    assert (await open_ws(port, headers="Origin: http://a.example\r\n")).status == 101
    assert (await open_ws(port, headers="Origin: http://a.example:80\r\n")).status == 101
    assert (await open_ws(port, headers="Origin: http://b.example\r\n")).status == 403
    assert (await open_ws(port, headers="Origin: https://a.example\r\n")).status == 403
    assert (await open_ws(port)).status == 101  # no Origin: not a browser, accepted
    # The refusal's log line may trail the 403 the client already has.
    refusal = re.escape("origin not allowed: not in the allowed list")
    await configured.process.wait_for_log_async(refusal)


async def test_nats_inside_frames(ws_server: WSServer, open_ws: OpenWS) -> None:
    """INFO names the WebSocket port; a PUB split over fragments and a ping are answered."""
    ws = await open_ws(ws_server.port)
    assert ws.status == 101
    info = await ws.read_data(b"\r\n")
    assert json.loads(info[5:])["port"] == ws_server.port
    ws.send(b'CONNECT {"verbose":false}\r\nSUB ws.frag 1\r\n')
    ws.send_frame(2, b"PUB ws.frag 5\r\nhe", fin=False)
    ws.send_frame(9, b"ping-in-the-middle")  # control frames may come between fragments
    ws.send_frame(0, b"llo\r\nPI", fin=False)
    ws.send_frame(0, b"NG\r\n")
    opcode, payload = await ws.read_frame()
    assert (opcode, payload) == (10, b"ping-in-the-middle")
    data = await ws.read_data(b"PONG\r\n")
    assert b"MSG ws.frag 1 5\r\nhello\r\n" in data
    ws.send_frame(8, b"\x03\xe8bye")
    assert await ws.closed() == (1000, b"bye")


async def test_compressed_both_ways(ws_server: WSServer, open_ws: OpenWS) -> None:
    ws = await open_ws(ws_server.port, headers="Sec-WebSocket-Extensions: permessage-deflate\r\n")
    assert "permessage-deflate" in (ws.header("Sec-WebSocket-Extensions") or "")
    await ws.read_data(b"\r\n")
    body = b"x" * 5000
    ws.send(b'CONNECT {"verbose":false}\r\nSUB ws.z 1\r\nPUB ws.z 5000\r\n' + body + b"\r\n")
    ws.send(b"PING\r\n", compress=True)
    data = await ws.read_data(b"PONG\r\n")
    assert b"MSG ws.z 1 5000\r\n" + body in data


BAD_FRAMES = [
    ("unmasked", dict(opcode=2, payload=b"PING\r\n", mask=False)),
    ("unknown-opcode", dict(opcode=3, payload=b"")),
    ("rsv1-without-deflate", dict(opcode=2, payload=b"x", rsv1=True)),
    ("fragmented-control", dict(opcode=9, payload=b"", fin=False)),
    ("orphan-continuation", dict(opcode=0, payload=b"x")),
    ("big-ping", dict(opcode=9, payload=b"p" * 126)),
    ("one-byte-close", dict(opcode=8, payload=b"\x03")),
    ("bad-close-code", dict(opcode=8, payload=b"\x03\x00")),
]


async def test_bad_frames_close_only_their_connection(
    ws_server: WSServer, open_ws: OpenWS, connect: Connect
) -> None:
    """Each offender is cut off (jetlake says why in a 1002 close frame; the reference
    mostly just drops the socket); a client beside them goes on undisturbed."""
    bystander = await connect(ws_server.process)
    sub = await bystander.subscribe("ws.bystander")
    for name, frame in BAD_FRAMES:
        ws = await open_ws(ws_server.port)
        await ws.read_data(b"\r\n")
        ws.send_frame(**frame)
        code, _ = await ws.closed()
        if ws_server.kind == "jetlake":
            assert code == 1002, name
        await bystander.publish("ws.bystander", name.encode())
        assert (await sub.next_msg(TIMEOUT)).data == name.encode()


async def test_garbage_instead_of_frames_closes_only_that_connection(
    ws_server: WSServer, open_ws: OpenWS, connect: Connect
) -> None:
    """A client that goes on writing plain text after the upgrade (a second HTTP request,
    then NATS without frames) is cut off; a client beside it is not disturbed."""
    bystander = await connect(ws_server.process)
    sub = await bystander.subscribe("ws.beside.garbage")
    ws = await open_ws(ws_server.port)
    await ws.read_data(b"\r\n")
    ws.writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nCONNECT {}\r\nPING\r\n" * 64)
    code, _ = await ws.closed()
    if ws_server.kind == "jetlake":
        assert code == 1002
    await bystander.publish("ws.beside.garbage", b"fine")
    assert (await sub.next_msg(TIMEOUT)).data == b"fine"


async def test_huge_frame_costs_no_memory(ws_server: WSServer, open_ws: OpenWS) -> None:
    """A frame announcing 1 TiB is read as a stream: the PUB inside it over max_payload
    is refused as over TCP, long before the frame would end."""
    ws = await open_ws(ws_server.port)
    await ws.read_data(b"\r\n")
    ws.writer.write(b"\x82\xff" + (1 << 40).to_bytes(8, "big") + b"\0\0\0\0")
    ws.writer.write(b'CONNECT {"verbose":false}\r\nPUB ws.huge 999999999\r\n')
    data = await ws.read_data(b"-ERR")
    assert b"-ERR 'Maximum Payload Violation'" in data


def _node_client(url: str, *args: str, tmp_path: Path) -> subprocess.Popen[str]:
    node = shutil.which("node")
    modules = NODE_TOOLS / "node_modules" / "@nats-io" / "nats-core"
    assert node and modules.is_dir(), "Node and .venv/node (scripts/install-node-tools) needed"
    (tmp_path / "node_modules").symlink_to(NODE_TOOLS / "node_modules")
    script = tmp_path / "client.mjs"
    shutil.copy(Path(__file__).with_name("nats_ws_client.mjs"), script)
    return subprocess.Popen(
        [node, "--experimental-websocket", str(script), url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_nats_javascript_client(
    ws_server: WSServer, connect: Connect, tmp_path: Path
) -> None:
    """The official JavaScript client (wsconnect, as in a browser) under Node: messages up
    to 300 kB both ways, request/reply, and a message from a TCP client."""
    proc = _node_client(f"ws://127.0.0.1:{ws_server.port}", tmp_path=tmp_path)
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)
        assert json.loads(ready or "{}").get("ready"), proc.stderr.read() if proc.stderr else ""
        connz = await get_json(f"{ws_server.process.http_url}/connz")
        assert {(c["type"], c.get("lang")) for c in connz["connections"]} >= {
            ("websocket", "nats.ws")
        }
        nc = await connect(ws_server.process)
        await nc.publish("ws.from.tcp", b"hello from tcp")
        await nc.flush()
        out, err = await asyncio.wait_for(asyncio.to_thread(proc.communicate), 20)
    finally:
        proc.kill()
    result = json.loads(out.strip().splitlines()[-1])
    assert "error" not in result, (result, err)
    assert result["port"] == ws_server.port
    sizes = [0, 1, 100, 4096, 70000, 300000]
    assert result["received"] == [[f"ws.data.{n}", n, True] for n in sizes]
    assert result["reply"] == "ping"
    assert result["tcp"] == ["hello from tcp"]


async def test_wss(server_kind: str, server_pool: ServerPool, pki: Pki, open_ws: OpenWS) -> None:
    """With `tls {}` the listener speaks wss://: the INFO inside says TLS is required and
    the NATS stream inside is plain (no second TLS layer)."""
    config = (
        f'websocket {{ port: -1, tls {{ cert_file: "{pki.server_cert}",'
        f' key_file: "{pki.server_key}" }} }}'
    )
    server = server_pool.get(server_kind, config=config)
    ws = await open_ws(ws_port(server), tls=pki.client_context())
    assert ws.status == 101
    info = json.loads((await ws.read_data(b"\r\n"))[5:])
    assert info["tls_required"] is True
    ws.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert b"PONG\r\n" in await ws.read_data(b"PONG\r\n")


async def test_websocket_authorization(configured: WSServer, tmp_path: Path) -> None:
    """`websocket { authorization }` replaces the server's (open) port's for these clients."""
    url = f"ws://127.0.0.1:{configured.port}"
    bad = _node_client(url, "web", "wrong", tmp_path=tmp_path)
    out, _ = await asyncio.wait_for(asyncio.to_thread(bad.communicate), 20)
    assert json.loads(out.strip().splitlines()[-1]) == {"error": "Authorization Violation"}


def test_mqtt_over_websocket(ws_server: WSServer) -> None:
    """paho's WebSocket transport on /mqtt: QoS 1 in, QoS 1 out, to a second paho client."""
    got: list[tuple[str, bytes, int]] = []
    received = threading.Event()

    def client(name: str) -> paho.Client:
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=name, transport="websockets")
        c.ws_set_options(path="/mqtt")
        c.connect("127.0.0.1", ws_server.port, keepalive=30)
        c.loop_start()
        return c

    sub = client(f"ws-sub-{ws_server.kind}")

    def on_message(_c: paho.Client, _u: object, msg: paho.MQTTMessage) -> None:
        got.append((msg.topic, msg.payload, msg.qos))
        received.set()

    subscribed = threading.Event()
    sub.on_message = on_message
    sub.on_subscribe = lambda *_args: subscribed.set()
    sub.subscribe("ws/t", qos=1)
    assert subscribed.wait(TIMEOUT)
    pub = client(f"ws-pub-{ws_server.kind}")
    pub.publish("ws/t", b"over websocket", qos=1).wait_for_publish(TIMEOUT)
    assert received.wait(TIMEOUT)
    assert got == [("ws/t", b"over websocket", 1)]
    for c in (pub, sub):
        c.disconnect()
        c.loop_stop()


async def test_lame_duck(make_server: MakeServer, open_ws: OpenWS) -> None:
    """SIGUSR2: WebSocket clients get the INFO with ldm, and the WebSocket port stops
    taking connections, as the client port does."""
    server = make_server(
        config='lame_duck_duration: "30s"\nlame_duck_grace_period: "100ms"\n'
        "websocket { port: -1, no_tls: true }\n"
    )
    port = ws_port(server)
    ws = await open_ws(port)
    await ws.read_data(b"\r\n")
    ws.send(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
    await ws.read_data(b"PONG\r\n")
    server.send_signal(signal.SIGUSR2)
    assert b'"ldm":true' in await ws.read_data(b'"ldm":true')
    with pytest.raises(OSError):
        await open_ws(port)


async def test_pong_leaves_with_what_followed_the_ping(
    ws_server: WSServer, open_ws: OpenWS
) -> None:
    """nats.py's WebSocket `flush()` writes its PING frame ahead of the SUB and PUB it
    queued before, then the test may kill the server once the PONG is in: what the
    frames read with the PING earned leaves in the PONG's write, as from the reference."""
    ws = await open_ws(ws_server.port)
    await ws.read_data(b"\r\n")  # INFO
    ws.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
    await ws.read_data(b"PONG\r\n")
    ws.send_together(
        b"PING\r\n", b"SUB ws.flushed 1\r\nPUB ws.flushed 5\r\nhello\r\nPUB ws.flushed 3\r\nbye\r\n"
    )
    payload = b""
    while not payload:  # the reference pings a client 2 s after it connects: set that aside
        opcode, frame = await ws.read_frame()
        assert opcode == 2
        payload = frame.replace(b"PING\r\n", b"")
    assert payload == b"PONG\r\nMSG ws.flushed 1 5\r\nhello\r\nMSG ws.flushed 1 3\r\nbye\r\n"
