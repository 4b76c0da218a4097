"""An operator's `nsc` keystore in a temp dir: operators, accounts and users issued the
way an operator issues them, and the JWTs and `.creds` files the tests log in with.

`nsc` is built into the venv by the set-up (scripts/install-nsc). Expiries below a
minute are beyond nsc's flags, so `mint_user` signs such a user JWT with the account's
key from the same keystore, as nsc itself would.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nkeys

NSC = Path(sys.executable).parent / "nsc"


class Nsc:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {
            **os.environ,
            "NSC_HOME": str(home),
            "NKEYS_PATH": str(home / "keys"),
            "HOME": str(home),
        }
        self.run("env", "-s", str(home / "store"))

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [str(NSC), *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise AssertionError(f"nsc {' '.join(args)} failed: {done.stderr}")
        return done.stdout + done.stderr

    def operator(self, name: str = "OP") -> None:
        """An operator with a signing key and a system account SYS with user `sys`."""
        self.run("add", "operator", "--generate-signing-key", "--sys", "--name", name)
        self.operator_name = name

    def describe(self, kind: str, *args: str) -> dict[str, Any]:
        return json.loads(self.run("describe", kind, *args, "--json"))

    def account_jwt(self, name: str) -> str:
        out = self.run("describe", "account", name, "--raw")
        return next(line for line in out.splitlines() if line.startswith("eyJ"))

    def operator_jwt(self) -> str:
        out = self.run("describe", "operator", "--raw")
        return next(line for line in out.splitlines() if line.startswith("eyJ"))

    def public(self, kind: str, *args: str) -> str:
        return str(self.describe(kind, *args)["sub"])

    def creds(self, account: str, user: str) -> Path:
        return self.home / "keys" / "creds" / self.operator_name / account / f"{user}.creds"

    def user_jwt(self, account: str, user: str) -> str:
        lines = self.creds(account, user).read_text().splitlines()
        return next(line for line in lines if line.startswith("eyJ"))

    def seed(self, public_key: str) -> bytes:
        """The seed of a key nsc generated, from its keystore."""
        found = list((self.home / "keys" / "keys").rglob(f"{public_key}.nk"))
        return found[0].read_bytes().strip()

    def memory_config(self) -> str:
        """A server config trusting the operator, with every account preloaded."""
        path = self.home / "memory.conf"
        self.run("generate", "config", "--mem-resolver", "--force", "--config-file", str(path))
        return path.read_text()

    def full_config(self, directory: Path) -> str:
        path = self.home / "full.conf"
        self.run("generate", "config", "--nats-resolver", "--force", "--config-file", str(path))
        return path.read_text().replace("dir: './jwt'", f"dir: '{directory}'")


def encode_jwt(claims: dict[str, Any], seed: bytes) -> str:
    """A JWT signed by `seed`, as nsc writes one."""

    def part(doc: dict[str, Any]) -> str:
        raw = json.dumps(doc, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    signed = part({"typ": "JWT", "alg": "ed25519-nkey"}) + "." + part(claims)
    sig = nkeys.from_seed(seed).sign(signed.encode())
    return signed + "." + base64.urlsafe_b64encode(sig).decode().rstrip("=")


def mint_user(
    account_seed: bytes, *, name: str = "minted", issuer_account: str | None = None, **nats: Any
) -> tuple[str, bytes]:
    """A new user's JWT (signed by `account_seed`) and seed; `exp` and `iat` go to the
    claims (and `nbf`), the rest to their `nats` section."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    user = nkeys.from_seed(seed).public_key.decode()
    issuer = nkeys.from_seed(account_seed).public_key.decode()
    claims: dict[str, Any] = {
        "jti": base64.b32encode(os.urandom(10)).decode(),
        "iat": nats.pop("iat", int(time.time())),
        "iss": issuer,
        "name": name,
        "sub": user,
    }
    for key in ("exp", "nbf"):
        if key in nats:
            claims[key] = nats.pop(key)
    limits = {"subs": -1, "data": -1, "payload": -1}  # nsc's defaults: no limit
    body: dict[str, Any] = {**limits, "type": "user", "version": 2, **nats}
    if issuer_account:
        body["issuer_account"] = issuer_account
    claims["nats"] = body
    return encode_jwt(claims, account_seed), seed


def creds_file(path: Path, token: str, seed: bytes) -> Path:
    """A `.creds` file as nsc writes it."""
    path.write_text(
        f"-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed.decode()}\n------END USER NKEY SEED------\n"
    )
    return path
