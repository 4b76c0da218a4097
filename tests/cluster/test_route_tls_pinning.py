"""Route TLS `pinned_certs` and `insecure`, differentially: a route whose peer's public
key is pinned forms, one whose key is not is refused and logged on the side that pins
it, and an `insecure` dialler routes to a server whose certificate it cannot verify,
with the reference's warning. Pins are computed with the openssl CLI, not by the code
under test."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from ingest.server.options import ConfigError, parse_serve_args
from ingest.server.pinning import public_key_id
from tests.conftest import MakeServer
from tests.support.cluster import free_port, routez
from tests.support.poll import poll
from tests.support.tls import Pki

pytestmark = pytest.mark.timeout(60)

NOT_PINNED = r"TLS route handshake error: certificate not pinned"


def pin_of(cert: Path) -> str:
    """The SHA-256 of the certificate's DER SubjectPublicKeyInfo, by openssl."""
    pem = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-pubkey", "-noout"],
        capture_output=True,
        check=True,
    ).stdout
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"], input=pem, capture_output=True, check=True
    ).stdout
    digest = subprocess.run(["openssl", "dgst", "-sha256", "-r"], input=der, capture_output=True)
    return digest.stdout.split()[0].decode()


def route_config(name: str, port: int, seeds: list[int], pki: Pki, extra: str = "") -> str:
    routes = ", ".join(f'"nats://127.0.0.1:{seed}"' for seed in seeds)
    return (
        f"server_name: {name}\n"
        f"cluster {{\n  name: C\n  listen: 127.0.0.1:{port}\n  pool_size: -1\n"
        f"  routes: [{routes}]\n"
        f'  tls {{ cert_file: "{pki.route_cert}", key_file: "{pki.route_key}",\n'
        f'        ca_file: "{pki.ca_cert}", verify: true, timeout: 2\n{extra}  }}\n}}\n'
    )


def routed(server: object) -> bool:
    return bool(routez(server)["num_routes"])  # type: ignore[arg-type]


def test_the_key_id_is_the_one_openssl_computes(pki: Pki) -> None:
    import ssl

    for cert in (pki.route_cert, pki.server_cert):
        der = ssl.PEM_cert_to_DER_cert(cert.read_text())
        assert public_key_id(der) == pin_of(cert)
    assert public_key_id(None) is None


def test_pinned_route_keys_route_and_others_are_refused(make_server: MakeServer, pki: Pki) -> None:
    """A pins B's key (both present the route certificate) and accepts it; C pins only
    the server certificate's key, so B's route to C is refused on both ends' pins."""
    pinned = f'    pinned_certs: ["{pin_of(pki.route_cert).upper()}"]\n'
    elsewhere = f'    pinned_certs: ["{pin_of(pki.server_cert)}"]\n'
    pa, pc = free_port(), free_port()
    a = make_server("-m", "-1", config=route_config("A", pa, [], pki, pinned))
    c = make_server("-m", "-1", config=route_config("C", pc, [], pki, elsewhere))
    b = make_server("-m", "-1", config=route_config("B", free_port(), [pa, pc], pki, pinned))
    poll(lambda: routed(a) and routed(b), "the pinned route A-B")
    c.wait_for_log(re.escape(NOT_PINNED))
    assert routez(c)["num_routes"] == 0
    assert {r["remote_name"] for r in routez(b)["routes"]} == {"A"}


def test_an_insecure_dialler_routes_to_a_certificate_it_cannot_verify(
    make_server: MakeServer, pki: Pki, other_pki: Pki
) -> None:
    """A's certificate is from a CA B does not trust; A trusts B's. With `insecure`, B
    dials A anyway (A still verifies B) and warns; without it, B refuses A."""
    pa = free_port()
    a_config = route_config("A", pa, [], other_pki).replace(
        str(other_pki.ca_cert), str(pki.ca_cert)
    )
    a = make_server("-m", "-1", config=a_config)
    b = make_server(
        "-m", "-1", config=route_config("B", free_port(), [pa], pki, "    insecure: true\n")
    )
    b.wait_for_log(
        re.escape(
            "TLS certificate chain and hostname of solicited routes will not be verified. "
            "DO NOT USE IN PRODUCTION!"
        )
    )
    poll(lambda: routed(a) and routed(b), "the insecure route")
    strict = make_server("-m", "-1", config=route_config("S", free_port(), [pa], pki))
    strict.wait_for_log(r"TLS route handshake error: .*certif")
    assert routez(strict)["num_routes"] == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '"abc"',
            "error parsing tls config, expected 'pinned_certs' to be a list of hex-encoded "
            "sha256 of DER encoded SubjectPublicKeyInfo",
        ),
        (
            '["xyz"]',
            "error parsing tls config, 'pinned_certs' key xyz does not look like hex-encoded "
            "sha256 of DER encoded SubjectPublicKeyInfo",
        ),
    ],
)
def test_malformed_pins_are_refused_in_the_references_words(
    tmp_path: Path, value: str, message: str
) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(f"cluster {{ port: 7000\n  tls {{ pinned_certs: {value} }} }}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_serve_args(["-c", str(conf)])


@pytest.mark.parametrize("section", ["websocket", "mqtt"])
def test_websocket_and_mqtt_refuse_pins(tmp_path: Path, section: str) -> None:
    """Their handshakes run in asyncio, where no pin would be checked."""
    conf = tmp_path / "c.conf"
    conf.write_text(f'{section} {{ port: 7000, tls {{ pinned_certs: ["{"a" * 64}"] }} }}\n')
    with pytest.raises(ConfigError, match="pinned_certs"):
        parse_serve_args(["-c", str(conf)])


@pytest.mark.soak  # two more servers per kind; the pins themselves are tested above
def test_a_reload_that_unpins_a_route_closes_it(make_server: MakeServer, pki: Pki) -> None:
    pinned = f'    pinned_certs: ["{pin_of(pki.route_cert)}"]\n'
    elsewhere = f'    pinned_certs: ["{pin_of(pki.server_cert)}"]\n'
    pa = free_port()
    a = make_server("-m", "-1", config=route_config("A", pa, [], pki, pinned))
    b = make_server("-m", "-1", config=route_config("B", free_port(), [pa], pki))
    poll(lambda: routed(a) and routed(b), "the pinned route")
    assert a.config_path is not None
    a.config_path.write_text(a.config_path.read_text().replace(pinned, elsewhere))
    a.send_signal(signal.SIGHUP)
    a.wait_for_log(re.escape("Disconnect 1 clients due to pinned certs reload"))
    a.wait_for_log(re.escape(NOT_PINNED))  # B dials again, and is refused
    assert routez(a)["num_routes"] == 0
