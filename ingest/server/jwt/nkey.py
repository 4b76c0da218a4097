"""Nkeys: ed25519 public keys written as base32 with a role prefix and a CRC-16.

A key is checked for its role (user, account, operator) before any signature made
with it is believed: a user key never stands in for an account's.
"""

from __future__ import annotations

import base64
import binascii
import os
from functools import lru_cache

from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError
from nacl.signing import VerifyKey

USER = 20 << 3  # 'U…'
ACCOUNT = 0  # 'A…'
OPERATOR = 14 << 3  # 'O…'
_NONCE_BYTES = 11  # the reference's nonce: 11 random bytes, 15 characters


class NkeyError(ValueError):
    """A string is no valid public nkey of the expected role."""


def _crc_table() -> tuple[int, ...]:
    table = []
    for high in range(256):
        crc = high << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC_TABLE = _crc_table()


def _crc16(data: bytes) -> int:
    """CRC-16/XMODEM, the checksum the nkey encoding appends (a byte at a time: a
    login's key is checked on every CONNECT, refused ones included)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC_TABLE[(crc >> 8) ^ byte]
    return crc


@lru_cache(maxsize=4096)
def decode_public(key: str, role: int) -> bytes:
    """The 32 raw key bytes of `key`, which must be a public nkey of `role` (cached: the
    same users and accounts log in again and again)."""
    try:
        raw = base64.b32decode(key.encode("ascii") + b"=" * (-len(key) % 8))
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise NkeyError(f"invalid nkey {key!r}") from exc
    if len(raw) != 35:
        raise NkeyError(f"invalid nkey {key!r}")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if _crc16(body) != crc:
        raise NkeyError(f"invalid checksum in nkey {key!r}")
    if body[0] != role:
        raise NkeyError(f"nkey {key!r} has the wrong role")
    return body[1:]


def is_public(key: object, role: int) -> bool:
    if not isinstance(key, str):
        return False
    try:
        decode_public(key, role)
    except NkeyError:
        return False
    return True


def decode_signature(sig: str) -> bytes | None:
    """Clients send base64url without padding; the reference also takes standard base64
    (padded), and nothing else: a padded base64url signature is refused."""
    try:
        if "=" not in sig:
            return base64.b64decode(sig + "=" * (-len(sig) % 4), altchars=b"-_", validate=True)
        return base64.b64decode(sig, validate=True)
    except (binascii.Error, ValueError):
        return None


def verify(key: str, role: int, data: bytes, signature: bytes) -> bool:
    """True when `signature` is `key`'s ed25519 signature of `data`."""
    try:
        VerifyKey(decode_public(key, role)).verify(data, signature)
    except (NkeyError, BadSignatureError, NaclValueError):
        return False
    return True


def verify_nonce(key: object, role: int, nonce: str, sig: object) -> bool:
    """A CONNECT's `sig` over the nonce of the INFO this server sent."""
    if not isinstance(key, str) or not isinstance(sig, str) or not nonce:
        return False
    raw = decode_signature(sig)
    return raw is not None and verify(key, role, nonce.encode(), raw)


def new_nonce() -> str:
    return base64.urlsafe_b64encode(os.urandom(_NONCE_BYTES)).decode().rstrip("=")
