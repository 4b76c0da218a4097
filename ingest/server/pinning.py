"""`tls { pinned_certs: [...] }`: a peer is accepted only when the SHA-256 of its
certificate's DER SubjectPublicKeyInfo is in the set, as the reference pins. Pinning the
public key rather than the certificate lets a certificate be renewed with the same key.

A handshake that completes with a peer outside the set fails like a bad certificate
(`CertNotPinned`, an `ssl.SSLError` the connections already log and close on)."""

from __future__ import annotations

import hashlib
import re
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.server.config_reader import Section

_HEX_SHA256 = re.compile(r"^[a-f0-9]{64}$")
_WHAT = "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo"


class CertNotPinned(ssl.SSLError):
    """The reference's `ErrCertNotPinned`."""

    reason = "certificate not pinned"

    def __str__(self) -> str:
        return self.reason


def pinned_certs(section: Section, name: str) -> frozenset[str] | None:
    """The configured set (lower-case hex); an empty list pins nothing, as on the
    reference."""
    value = section.table[name]
    if not isinstance(value, list):
        raise section.error(
            name, f"error parsing tls config, expected 'pinned_certs' to be a list of {_WHAT}"
        )
    entries = frozenset(str(entry).lower() for entry in value)
    for entry in sorted(entries):
        if not _HEX_SHA256.match(entry):
            raise section.error(
                name,
                f"error parsing tls config, 'pinned_certs' key {entry} does not look like {_WHAT}",
            )
    return entries or None


def public_key_id(der: bytes | None) -> str | None:
    """The pin of a DER certificate: SHA-256 over its SubjectPublicKeyInfo, in hex;
    None without a certificate (the peer sent none)."""
    if not der:
        return None
    _, tbs, _ = _tlv(der, 0)  # Certificate ::= SEQUENCE { tbsCertificate, … }
    _, at, _ = _tlv(der, tbs)
    tag, _, end = _tlv(der, at)
    if tag == 0xA0:  # [0] version, present from v2 on
        at = end
    for _ in range(5):  # serialNumber, signature, issuer, validity, subject
        at = _tlv(der, at)[2]
    end = _tlv(der, at)[2]
    return hashlib.sha256(der[at:end]).hexdigest()


def check_pinned(obj: ssl.SSLObject, pinned: frozenset[str] | None) -> None:
    """Raise CertNotPinned when a pin set is given and the peer's key is not in it."""
    if pinned is not None and public_key_id(obj.getpeercert(binary_form=True)) not in pinned:
        raise CertNotPinned()


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, where the content starts, where it ends) of the DER element at `at`."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(der[at : at + size], "big")
        at += size
    return tag, at, at + length
