"""Config reload of a leafnode link's TLS and compression, on both servers: new
certificates serve the next handshakes while the links already up stay; a broken
certificate file refuses the reload naming the file and the old one stays in force; a
changed compression switches a live link's level, or closes it to be negotiated again
when the new mode is `off`."""

from __future__ import annotations

import re
import signal
import socket
import ssl
from pathlib import Path

import pytest

from ingest.server.leafnode.reload import LeafReloadRefused, remote_changes
from ingest.server.options import load_config
from tests.conftest import MakeServer
from tests.leafnode.conftest import leaf_port, leafz
from tests.support.poll import poll
from tests.support.servers import ServerProcess
from tests.support.tls import Pki

pytestmark = pytest.mark.timeout(60)

RELOADED = "Reloaded server configuration"
PIN = "b" * 64  # a key no certificate here has
FAILED = "Failed to reload server configuration: "


def _reload(server: ServerProcess, text: str, *, marker: str = RELOADED) -> None:
    """Write the new file, SIGHUP, and wait for one more `marker` line in the log."""
    assert server.config_path is not None
    seen = server.log().count(marker)
    server.config_path.write_text(text)
    server.send_signal(signal.SIGHUP)
    poll(lambda: server.log().count(marker) > seen, f"{server.kind}: {marker!r}", 10)


def _ids(server: ServerProcess) -> list[int]:
    return sorted(int(leaf["id"]) for leaf in leafz(server)["leafs"])


def _tls(cert: Path | str, key: Path, pki: Pki, *, verify: bool = False) -> str:
    return (
        f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki.ca_cert}", '
        f"verify: {str(verify).lower()} }}"
    )


def _presented(port: int) -> bytes:
    """The certificate a new leafnode connection is shown: INFO first, then TLS."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        info = b""
        while not info.endswith(b"\r\n"):
            info += sock.recv(4096)
        assert info.startswith(b"INFO "), info
        with ctx.wrap_socket(sock) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


async def test_reloaded_certificates_serve_new_handshakes_and_keep_links(
    make_server: MakeServer, pki: Pki, other_pki: Pki, tmp_path: Path
) -> None:
    hub_conf = "leafnodes {{ listen: 127.0.0.1:-1\n  {} }}\n"
    hub = make_server("-m", "-1", config=hub_conf.format(_tls(pki.route_cert, pki.route_key, pki)))
    port = leaf_port(hub)
    leaf_conf = 'leafnodes {{ reconnect: 1, remotes [ {{ url: "tls://127.0.0.1:{}"\n {} }} ] }}\n'
    leaf = make_server(
        "-m", "-1", config=leaf_conf.format(port, _tls(pki.route_cert, pki.route_key, pki))
    )
    poll(lambda: len(_ids(hub)) == 1, "the TLS link")
    links = _ids(hub)
    assert _presented(port) == _der(pki.route_cert)

    _reload(hub, hub_conf.format(_tls(pki.server_cert, pki.server_key, pki)))
    assert _presented(port) == _der(pki.server_cert)
    assert _ids(hub) == links  # the link made with the old certificate stays

    # A kept remote's certificate reloads too, its link kept.
    _reload(leaf, leaf_conf.format(port, _tls(pki.client_cert, pki.client_key, pki)))
    assert _ids(hub) == links

    missing = tmp_path / "gone.pem"
    _reload(hub, hub_conf.format(_tls(missing, pki.server_key, pki)), marker=FAILED)
    failed = hub.find_log(re.escape(FAILED) + r"(.*\.conf):(\d+:\d+): (.*)")
    assert failed is not None
    assert (Path(failed.group(1)), failed.group(2)) == (hub.config_path, "2:3")  # `tls`
    reason = f"error parsing X509 certificate/key pair: open {missing}: no such file or directory"
    assert failed.group(3) == reason
    assert _presented(port) == _der(pki.server_cert)  # the old certificates in force
    assert _ids(hub) == links

    # The listener's pinned_certs are no TLS certificate: a change needs a restart.
    pinned = _tls(pki.server_cert, pki.server_key, pki)[:-2] + f', pinned_certs: ["{PIN}"] }}'
    _reload(hub, hub_conf.format(pinned), marker=FAILED)
    refused = 'config reload not supported for LeafNode: field "TLSPinnedCerts": '
    assert hub.find_log(re.escape(f"{FAILED}{refused}old=map[], new=map[{PIN}:{{}}]"))
    assert _ids(hub) == links

    # A kept remote's new TLS serves its next handshake: trusting another CA only, its
    # redial (the hub's new `compression: off` closes the link) refuses the hub.
    _reload(leaf, leaf_conf.format(port, _tls(pki.client_cert, pki.client_key, other_pki)))
    assert _ids(hub) == links
    hub_off = hub_conf.replace("-1\n", "-1, compression: off\n")
    _reload(hub, hub_off.format(_tls(pki.server_cert, pki.server_key, pki)))
    await leaf.wait_for_log_async(r"TLS leafnode handshake error: .*certific")


async def test_reloaded_compression_applies_to_live_links(make_server: MakeServer) -> None:
    hub_conf = "leafnodes {{ listen: 127.0.0.1:{}, compression: {} }}\n"
    hub = make_server("-m", "-1", config=hub_conf.format(-1, "s2_fast"))
    port = leaf_port(hub)
    url = f"nats-leaf://127.0.0.1:{port}"
    leaf_conf = 'leafnodes {{ reconnect: 1, remotes [ {{ url: "{}", compression: {} }} ] }}\n'
    leaf = make_server("-m", "-1", config=leaf_conf.format(url, "s2_fast"))
    poll(lambda: len(_ids(hub)) == 1, "the compressed link")
    links = _ids(hub)
    assert leafz(hub)["leafs"][0]["compression"] == "s2_fast"

    # Another level: the live link switches its writer.
    _reload(hub, hub_conf.format(-1, "s2_best"))
    assert hub.find_log(re.escape("Reloaded: LeafNode Compression value is: {s2_best []}"))
    assert _ids(hub) == links
    assert leafz(hub)["leafs"][0]["compression"] == "s2_best"

    # `off` is negotiated: the link is closed and made again, uncompressed.
    _reload(leaf, leaf_conf.format(url, "off"))
    name = f'urls=["{url}"], account="$G"'
    notice = f"Reloaded: LeafNode Remote {name} Compression value is: {{off []}}"
    assert leaf.find_log(re.escape(notice))
    poll(
        lambda: [link["compression"] for link in leafz(leaf)["leafs"]] == ["off"],
        "the link made again without compression",
    )
    assert _ids(hub) != links


def test_the_plan_names_new_compressions_in_the_references_words(tmp_path: Path) -> None:
    """Pure: the notices of a listener's and a kept remote's new compression (the
    reference prints its struct), and the kept remote paired with its new settings."""
    text = (
        "leafnodes {{ listen: 127.0.0.1:-1, compression: {}\n"
        '  remotes [ {{ url: "nats-leaf://h:7422", compression: {} }} ] }}\n'
    )
    path = tmp_path / "server.conf"
    path.write_text(text.format("off", "s2_fast"))
    before = load_config(str(path))
    path.write_text(text.format("s2_auto", "s2_auto"))
    after = load_config(str(path))
    assert before.leafnodes is not None and after.leafnodes is not None
    changes = remote_changes(before.leafnodes, after.leafnodes)
    assert changes.notices == (
        "Reloaded: LeafNode Compression value is: {s2_auto [10ms 50ms 100ms]}",
        'Reloaded: LeafNode Remote urls=["nats-leaf://h:7422"], account="$G" '
        "Compression value is: {s2_auto [10ms 50ms 100ms]}",
    )
    assert changes.kept == ((before.leafnodes.remotes[0], after.leafnodes.remotes[0]),)
    assert not changes.added and not changes.removed


@pytest.mark.parametrize(
    ("tls_keys", "refused"),
    [
        # An unset auth timeout follows the TLS timeout (one second more), as the
        # reference derives it, so that is the field its refusal names first.
        ("timeout: 3", 'field "AuthTimeout": old=3, new=4'),
        (f'pinned_certs: ["{PIN}"]', f'field "TLSPinnedCerts": old=map[], new=map[{PIN}:{{}}]'),
    ],
)
def test_the_listeners_tls_timeout_and_pins_need_a_restart(
    tmp_path: Path, tls_keys: str, refused: str
) -> None:
    """Pure: of the listener's `tls`, only its certificates reload; the reference keeps
    its timeout and pins beside the TLS config, and refuses their change."""
    text = 'leafnodes {{ listen: 127.0.0.1:-1, tls {{ cert_file: "{c}", key_file: "{c}"{} }} }}\n'
    cert = tmp_path / "cert.pem"
    cert.write_text("")
    path = tmp_path / "server.conf"
    path.write_text(text.format("", c=cert))
    before = load_config(str(path))
    path.write_text(text.format(f", {tls_keys}", c=cert))
    after = load_config(str(path))
    assert before.leafnodes is not None and after.leafnodes is not None
    with pytest.raises(LeafReloadRefused) as refusal:
        remote_changes(before.leafnodes, after.leafnodes)
    assert str(refusal.value) == refused
