"""A listener's or a link's `tls {}` block, as every kind of connection configures it:
a leaf module so that the settings of each kind (cluster, leafnodes, WebSocket) and the
server's `Options` can all name it."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TLS_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSConfig:
    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    verify: bool = False
    handshake_first: bool = False
    # Seconds to wait for a client's TLS hello before falling back to INFO first.
    handshake_first_fallback: float | None = None
    timeout: float = DEFAULT_TLS_TIMEOUT
    insecure: bool = False  # the dialling side checks neither the chain nor the host
    # Hex SHA-256 of each accepted peer's DER SubjectPublicKeyInfo; None: any peer.
    pinned_certs: frozenset[str] | None = None
