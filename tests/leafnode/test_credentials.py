"""A remote's credentials file: its JWT is sent and the hub's nonce signed with its seed."""

from __future__ import annotations

import base64
from pathlib import Path

import nkeys
import pytest

from ingest.server.leafnode.manager import _signed

SEED = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4SY"  # the NATS docs' example
JWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJzdWIiOiJVQSJ9.c2ln"


def creds(jwt: str, seed: str, *, final_newline: bool = True) -> str:
    text = (
        f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------"
    )
    return text + "\n" if final_newline else text


@pytest.mark.parametrize("final_newline", [True, False])
def test_the_nonce_is_signed_with_the_seed(tmp_path: Path, final_newline: bool) -> None:
    path = tmp_path / "leaf.creds"
    path.write_text(creds(JWT, SEED, final_newline=final_newline))
    signed = _signed(str(path), "nonce-from-the-hub")
    assert signed["jwt"] == JWT
    sig = base64.urlsafe_b64decode(signed["sig"] + "=" * (-len(signed["sig"]) % 4))
    assert nkeys.from_seed(SEED.encode()).verify(b"nonce-from-the-hub", sig)


def test_a_file_without_a_seed_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.creds"
    path.write_text("-----BEGIN NATS USER JWT-----\nabc\n------END NATS USER JWT------\n")
    with pytest.raises(ValueError, match=r"broken\.creds"):
        _signed(str(path), "n")
