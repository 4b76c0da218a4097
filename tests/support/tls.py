"""Throw-away PKI for TLS tests, made with the openssl CLI at test time.

Checked-in certificates expire and tempt reuse outside tests; generating a CA,
a server certificate (SAN localhost and 127.0.0.1), a client certificate and a
route certificate (both, as a server that dials routes presents one cert either
way) takes well under a second, once per session.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """Paths of a test CA and the certificates it signed."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    route_cert: Path
    route_key: Path

    def client_context(self, *, with_cert: bool = False) -> ssl.SSLContext:
        """A client context trusting the test CA, optionally presenting the client cert."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_pki(directory: Path) -> Pki:
    """Create the CA, server and client certificates under ``directory``."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl CLI is required for TLS tests")
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=jetlake test CA",
        cwd=d,
    )  # fmt: skip
    (d / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    (d / "route.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    for name in ("server", "client", "route"):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={name}",
            cwd=d,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
            cwd=d,
        )  # fmt: skip
    return Pki(
        ca_cert=d / "ca.pem",
        server_cert=d / "server.pem",
        server_key=d / "server.key",
        client_cert=d / "client.pem",
        client_key=d / "client.key",
        route_cert=d / "route.pem",
        route_key=d / "route.key",
    )
