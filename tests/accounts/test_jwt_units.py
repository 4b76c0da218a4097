"""The jwt package without sockets: nkey checks, JWT decoding and the operator → account
→ user chain, and the config keys of operator mode with the reference's errors."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import nkeys
import pytest

from ingest.server.auth.authenticator import Authenticator
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey, trust
from ingest.server.jwt.settings import CACHE, URL
from ingest.server.jwt.store import AccountStore
from ingest.server.options import ConfigError, load_config, validate_options
from tests.support.nsc import encode_jwt, mint_user


def _seed(prefix: int) -> bytes:
    return nkeys.encode_seed(os.urandom(32), prefix)


def _pub(seed: bytes) -> str:
    return nkeys.from_seed(seed).public_key.decode()


OPERATOR = _seed(nkeys.PREFIX_BYTE_OPERATOR)
OP_SIGNER = _seed(nkeys.PREFIX_BYTE_OPERATOR)
ACCOUNT = _seed(nkeys.PREFIX_BYTE_ACCOUNT)
ACC_SIGNER = _seed(nkeys.PREFIX_BYTE_ACCOUNT)


def _claims(subject: str, issuer: bytes, kind: str, **nats: object) -> dict[str, object]:
    now = int(time.time())
    return {
        "jti": "x",
        "iat": now,
        "iss": _pub(issuer),
        "name": kind,
        "sub": subject,
        "nats": {"type": kind, "version": 2, **nats},
    }


def _operator_jwt(**nats: object) -> str:
    claims = _claims(_pub(OPERATOR), OPERATOR, "operator", signing_keys=[_pub(OP_SIGNER)], **nats)
    return encode_jwt(claims, OPERATOR)


def _account_jwt(issuer: bytes = OP_SIGNER, **nats: object) -> str:
    return encode_jwt(_claims(_pub(ACCOUNT), issuer, "account", **nats), issuer)


def _store(**account: object) -> AccountStore:
    store = AccountStore(trust.Operators([jwt.decode(_operator_jwt(), "operator")]))
    store.put(_account_jwt(**account), time.time())
    return store


def _connect(token: str, seed: bytes, nonce: str = "NONCE") -> dict[str, object]:
    sig = base64.urlsafe_b64encode(nkeys.from_seed(seed).sign(nonce.encode())).decode()
    return {"jwt": token, "sig": sig.rstrip("=")}


def test_nkey_roles_and_checksums() -> None:
    user = _pub(_seed(nkeys.PREFIX_BYTE_USER))
    assert nkey.is_public(user, nkey.USER)
    assert not nkey.is_public(user, nkey.ACCOUNT)
    flipped = user[:-1] + ("A" if user[-1] != "A" else "B")
    assert not nkey.is_public(flipped, nkey.USER)
    assert not nkey.is_public("U" + "A" * 55, nkey.USER)


def test_a_user_logs_in_and_gets_its_permissions() -> None:
    store = _store()
    token, seed = mint_user(ACCOUNT, pub={"allow": ["a.>"]}, sub={"deny": ["b"]})
    found = trust.authenticate(_connect(token, seed), "NONCE", store.get, time.time(), "STANDARD")
    assert (found.account, found.pub_allow, found.sub_deny) == (_pub(ACCOUNT), ("a.>",), ("b",))


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("wrong nonce", "does not verify the nonce"),
        ("expired", "has expired"),
        ("revoked", "has been revoked"),
        ("unknown signer", "issuer is not known"),
        ("websocket only", "may not connect as STANDARD"),
    ],
)
def test_refusals_say_why(case: str, why: str) -> None:
    now = time.time()
    fields: dict[str, object] = {}
    signer = ACCOUNT
    if case == "expired":
        fields["exp"] = int(now) - 1
    if case == "websocket only":
        fields["allowed_connection_types"] = ["WEBSOCKET"]
    if case == "unknown signer":
        signer, fields["issuer_account"] = ACC_SIGNER, _pub(ACCOUNT)
    token, seed = mint_user(signer, **fields)
    user = jwt.decode(token, "user").subject
    store = _store(revocations={user: int(now) + 5} if case == "revoked" else {})
    nonce = "OTHER" if case == "wrong nonce" else "NONCE"
    with pytest.raises(jwt.JWTError, match=why):
        trust.authenticate(_connect(token, seed, nonce), "NONCE", store.get, now, "STANDARD")


def test_scoped_signing_key_fills_the_template() -> None:
    scope = {
        "kind": "user_scope",
        "key": _pub(ACC_SIGNER),
        "role": "dev",
        "template": {"pub": {"allow": ["{{name()}}.>", "t.{{tag(team)}}"]}},
    }
    store = _store(signing_keys=[scope])
    token, seed = mint_user(
        ACC_SIGNER,
        name="ann",
        issuer_account=_pub(ACCOUNT),
        tags=["team:x"],
        subs=0,
        data=0,
        payload=0,
    )
    found = trust.authenticate(_connect(token, seed), "NONCE", store.get, time.time(), "STANDARD")
    assert found.pub_allow == ("ann.>", "t.x")


def test_the_store_keeps_the_newest_jwt_and_trusts_only_the_operator() -> None:
    store = _store()
    older = encode_jwt({**_claims(_pub(ACCOUNT), OP_SIGNER, "account"), "iat": 1}, OP_SIGNER)
    with pytest.raises(jwt.JWTError, match="older"):
        store.put(older, time.time())
    stranger = _seed(nkeys.PREFIX_BYTE_OPERATOR)
    with pytest.raises(jwt.JWTError, match="not issued by a trusted operator"):
        store.put(_account_jwt(stranger), time.time())


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "server.conf"
    path.write_text(text)
    opts = load_config(str(path))
    validate_options(opts)
    return opts


USER = _pub(_seed(nkeys.PREFIX_BYTE_USER))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("authorization { users: [ { nkey: UBAD } ] }", "Not a valid public nkey for a user"),
        (f"authorization {{ users: [ {{ nkey: {USER}, user: b }} ] }}", "do not take usernames"),
        (f"authorization {{ users: [ {{nkey: {USER}}}, {{nkey: {USER}}} ] }}", "Duplicate nkey"),
        ("operator: /nonexistent/op.jwt", "error parsing operator JWT: open /nonexistent/op.jwt"),
        ("operator: OPJWT\nresolver: { type: bogus }", "error parsing account resolver"),
        (
            "operator: OPJWT\nresolver: MEMORY\nresolver_preload: { AX: garbage }",
            "invalid account JWT",
        ),
        (
            "operator: OPJWT\nresolver: MEMORY\nauthorization { users: [ {user: a} ] }",
            "operators do not allow users to be configured directly",
        ),
        (
            "operator: OPJWT\nresolver: MEMORY\naccounts { X {} }",
            "operators do not allow Accounts to be configured directly",
        ),
        (
            f"operator: OPJWT\nresolver: MEMORY\nsystem_account: {_pub(ACCOUNT)}",
            "system_account in config and operator JWT must be identical",
        ),
        ("operator: OPJWT", "operators require an account resolver to be configured"),
        ("operator: OPJWT\nresolver: BOGUS", "error parsing account resolver"),
        ('operator: OPJWT\nresolver { type: cache, dir: d, interval: "1m" }', "accept sync"),
        ("operator: OPJWT\nresolver { type: cache, dir: d, allow_delete: true }", "allow_delete"),
        ('operator: OPJWT\nresolver { type: full, dir: d, ttl: "1m" }', "FULL does not accept"),
        (
            "operator: OPJWT\nresolver { type: full, dir: d, hard_delete: true }",
            "hard_delete has no effect without delete",
        ),
    ],
)
def test_config_errors(tmp_path: Path, text: str, message: str) -> None:
    token = _operator_jwt(system_account=_pub(ACC_SIGNER))
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, text.replace("OPJWT", token))


def test_operator_config_is_read(tmp_path: Path) -> None:
    token = _operator_jwt(system_account=_pub(ACCOUNT))
    (tmp_path / "op.jwt").write_text(f"-----BEGIN NATS OPERATOR JWT-----\n{token}\n------END\n")
    opts = _load(
        tmp_path,
        f"operator: {tmp_path / 'op.jwt'}\nresolver {{ type: full, dir: {tmp_path / 'jwt'} }}\n"
        f"resolver_preload: {{ {_pub(ACCOUNT)}: {_account_jwt()} }}",
    )
    assert opts.operators == (token,)  # type: ignore[attr-defined]
    assert opts.system_account == _pub(ACCOUNT)  # type: ignore[attr-defined]
    assert opts.resolver.dir == str(tmp_path / "jwt")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'resolver: URL("http://h:1/jwt/v1/accounts")',
            {"type": URL, "url": "http://h:1/jwt/v1/accounts/"},
        ),
        ("resolver: url(http://h:1/a/)", {"type": URL, "url": "http://h:1/a/"}),
        (
            'resolver { type: CACHE, dir: d, limit: 5, ttl: "2m", timeout: "3s" }',
            {"type": CACHE, "dir": "d", "limit": 5, "ttl": 120.0, "timeout": 3.0},
        ),
        ("resolver { type: cache, dir: d }", {"type": CACHE, "limit": 1000, "ttl": 0.0}),
        (
            "resolver { type: full, dir: d, allow_delete: true, hard_delete: true }",
            {"type": "full", "allow_delete": True, "hard_delete": True, "limit": 0},
        ),
        ("resolver { type: full, dir: d, limit: 3 }", {"type": "full", "limit": 3}),
        # The operator's account server is the resolver when none is configured.
        ("", {"type": URL, "url": "http://acc:9090/jwt/v1/accounts/"}),
    ],
)
def test_resolver_config_is_read(tmp_path: Path, text: str, expected: dict[str, object]) -> None:
    token = _operator_jwt(account_server_url="http://acc:9090/jwt/v1/")
    resolver = _load(tmp_path, f"operator: {token}\n{text}").resolver  # type: ignore[attr-defined]
    assert {field: getattr(resolver, field) for field in expected} == expected


def test_the_earlier_expiry_counts_and_names_who_expired() -> None:
    now = time.time()
    store = _store()
    store.put(
        encode_jwt(
            {**_claims(_pub(ACCOUNT), OP_SIGNER, "account"), "exp": int(now) + 60}, OP_SIGNER
        ),
        now,
    )
    token, seed = mint_user(ACCOUNT, exp=int(now) + 120)
    found = trust.authenticate(_connect(token, seed), "NONCE", store.get, now, "STANDARD")
    assert (found.expires, found.account_expires_first) == (int(now) + 60, True)
    token, seed = mint_user(ACCOUNT, exp=int(now) + 30)
    found = trust.authenticate(_connect(token, seed), "NONCE", store.get, now, "STANDARD")
    assert (found.expires, found.account_expires_first) == (int(now) + 30, False)


def test_v1_tokens_sign_the_claims_only() -> None:
    """Operators made before JWT v2 (`alg: ed25519`, `type` outside `nats`) still load."""

    def part(doc: dict[str, object]) -> str:
        raw = json.dumps(doc).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    body = part({"iss": _pub(OPERATOR), "sub": _pub(OPERATOR), "type": "operator", "iat": 1})
    header = part({"typ": "jwt", "alg": "ed25519"})

    def signed(seed: bytes) -> str:
        sig = nkeys.from_seed(seed).sign(body.encode())
        return f"{header}.{body}." + base64.urlsafe_b64encode(sig).decode().rstrip("=")

    assert jwt.decode(signed(OPERATOR), "operator").subject == _pub(OPERATOR)
    with pytest.raises(jwt.JWTError, match="invalid signature"):
        jwt.decode(signed(OP_SIGNER), "operator")


@pytest.mark.parametrize(
    ("src", "host", "admitted"),
    [
        (["127.0.0.0/8"], "127.0.0.1", True),
        ("10.0.0.0/8, 127.0.0.1/32", "127.0.0.1", True),  # the older comma-separated form
        (["192.0.2.0/24"], "127.0.0.1", False),
        (["::1/128"], "::1", True),
        (["127.0.0.0/8"], "", False),  # an unknown address is not admitted
    ],
)
def test_source_networks(src: object, host: str, admitted: bool) -> None:
    store = _store()
    token, seed = mint_user(ACCOUNT, src=src)
    args = (_connect(token, seed), "NONCE", store.get, time.time(), "STANDARD", host)
    if admitted:
        assert trust.authenticate(*args).user == jwt.decode(token, "user").subject
    else:
        with pytest.raises(jwt.JWTError, match="may not connect from"):
            trust.authenticate(*args)


def test_no_auth_user_may_name_an_nkey_user(tmp_path: Path) -> None:
    """A client without credentials is logged in as the nkey user `no_auth_user` names."""
    opts = _load(
        tmp_path,
        f"authorization {{ users: [ {{ nkey: {USER} }} ] }}\nno_auth_user: {USER}",
    )
    grant = Authenticator(opts).authenticate({}, nonce="NONCE")  # type: ignore[arg-type]
    assert grant.user == USER
