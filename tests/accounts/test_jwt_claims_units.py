"""The pure parts of JWT claims without sockets: an account JWT's exports and imports read
into config-file shapes and their activation tokens judged; a user JWT's connect-time
windows; response permissions counted and timed."""

from __future__ import annotations

import datetime
import logging
import os
import time
import zoneinfo
from pathlib import Path
from typing import Any

import nkeys
import pytest

from ingest.server.accounts.settings import HEADERS_SAMPLING, Import
from ingest.server.auth.resolver import Resolver
from ingest.server.jwt import claims as jwt
from ingest.server.jwt.exports import imported_from, invalid_imports, shares
from ingest.server.jwt.times import window_end
from ingest.server.jwt.trust import account_limits
from ingest.server.options import ConfigError, load_config, validate_options
from ingest.server.responses import Responses
from tests.support.nsc import encode_jwt

OPERATOR = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_OPERATOR)


def _account_seed() -> bytes:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)


def _pub(seed: bytes) -> str:
    return nkeys.from_seed(seed).public_key.decode()


def _operator_jwt() -> str:
    """The self-signed operator JWT the operator-mode configs below start from."""
    claims = {"iat": 1, "iss": _pub(OPERATOR), "sub": _pub(OPERATOR), "nats": {"type": "operator"}}
    return encode_jwt(claims, OPERATOR)


def _account(seed: bytes, **nats: Any) -> jwt.Claims:
    claims = {
        "iat": int(time.time()),
        "iss": _pub(OPERATOR),
        "sub": _pub(seed),
        "nats": {"type": "account", "version": 2, **nats},
    }
    return jwt.decode(encode_jwt(claims, OPERATOR), "account")


def _activation(signer: bytes, importer: str, subject: str = "svc.>", **extra: Any) -> str:
    exp = extra.pop("exp", 0)
    iat = extra.pop("iat", int(time.time()))
    nats = {"subject": subject, "kind": "service", "type": "activation", "version": 2, **extra}
    claims: dict[str, Any] = {"iat": iat, "iss": _pub(signer), "sub": importer, "nats": nats}
    if exp:
        claims["exp"] = exp
    return encode_jwt(claims, signer)


EXPORTER, IMPORTER, OTHER = _account_seed(), _account_seed(), _account_seed()
SIGNER = _account_seed()


def _exporter(**export: Any) -> jwt.Claims:
    exports = [
        {"subject": "svc.>", "type": "service", "token_req": True, **export},
        {"subject": "pub.svc", "type": "service", "response_type": "Stream",
         "response_threshold": 5_000_000_000,
         "service_latency": {"results": "lat", "sampling": "headers"}},
        {"subject": "events.>", "type": "stream"},
    ]  # fmt: skip
    return _account(EXPORTER, exports=exports, signing_keys=[_pub(SIGNER)])


def _importer(*imports: dict[str, Any]) -> jwt.Claims:
    return _account(IMPORTER, imports=[{"account": _pub(EXPORTER), **i} for i in imports])


def _shares(importer: jwt.Claims, exporter: jwt.Claims | None = None) -> tuple[Any, ...]:
    held = {c.subject: c for c in (exporter or _exporter(),)}
    return shares(importer, held.get, time.time())


def test_imports_read_as_config_imports() -> None:
    importer = _importer(
        {"subject": "pub.svc", "type": "service", "local_subject": "mine.svc"},
        {"subject": "events.>", "type": "stream", "local_subject": "ev.>"},
        {"subject": "events.a", "type": "stream", "to": "pre"},
    )
    found, missing, ends, refused = _shares(importer)
    assert [s.imp for s in found] == [
        Import(service=True, account=_pub(EXPORTER), subject="pub.svc", to="mine.svc"),
        Import(service=False, account=_pub(EXPORTER), subject="events.>", to="ev.>"),
        Import(service=False, account=_pub(EXPORTER), subject="events.a", prefix="pre"),
    ]
    export = found[0].export
    assert (export.response_type, export.response_threshold) == ("Stream", 5.0)
    assert export.latency is not None and export.latency.sampling == HEADERS_SAMPLING
    assert (missing, ends, refused) == (set(), 0, [])
    assert imported_from(importer) == {_pub(EXPORTER)}


def test_unknown_exporter_and_unexported_subject() -> None:
    stranger = _account(
        IMPORTER, imports=[{"account": _pub(OTHER), "subject": "x", "type": "stream"}]
    )
    assert _shares(stranger)[1] == {_pub(OTHER)}
    found, _, _, refused = _shares(_importer({"subject": "nope", "type": "stream"}))
    assert not found and "not exported" in refused[0]


def test_an_account_token_position_admits_the_importers_own_subjects() -> None:
    exporter = _account(
        EXPORTER, exports=[{"subject": "orders.*", "type": "stream", "account_token_position": 2}]
    )
    own, other = f"orders.{_pub(IMPORTER)}", f"orders.{_pub(OTHER)}"
    found, _, _, refused = _shares(
        _importer({"subject": own, "type": "stream"}, {"subject": other, "type": "stream"}),
        exporter,
    )
    assert [s.imp.subject for s in found] == [own]
    assert len(refused) == 1 and other in refused[0]


@pytest.mark.parametrize(
    ("token", "served"),
    [
        (lambda: _activation(EXPORTER, _pub(IMPORTER)), True),
        (lambda: _activation(SIGNER, _pub(IMPORTER), issuer_account=_pub(EXPORTER)), True),
        (lambda: _activation(OTHER, _pub(IMPORTER), issuer_account=_pub(EXPORTER)), False),
        (lambda: _activation(EXPORTER, _pub(IMPORTER), exp=int(time.time()) - 1), False),
        (lambda: None, False),
    ],
    ids=["exporter", "signing-key", "stranger-key", "expired", "no-token"],
)
def test_private_export_needs_a_verified_token(token: Any, served: bool) -> None:
    imp: dict[str, Any] = {"subject": "svc.a", "type": "service"}
    if token() is not None:
        imp["token"] = token()
    found, _, _, refused = _shares(_importer(imp))
    assert bool(found) == served and bool(refused) != served


def test_a_token_expiring_later_sets_when_to_judge_again() -> None:
    exp = int(time.time()) + 60
    imp = {
        "subject": "svc.a",
        "type": "service",
        "token": _activation(EXPORTER, _pub(IMPORTER), exp=exp),
    }
    assert _shares(_importer(imp))[2] == exp


def test_revoked_activation() -> None:
    token = _activation(EXPORTER, _pub(IMPORTER), iat=int(time.time()) - 10)
    exporter = _exporter(revocations={_pub(IMPORTER): int(time.time())})
    found, _, _, refused = _shares(
        _importer({"subject": "svc.a", "type": "service", "token": token}), exporter
    )
    assert not found and "revoked" in refused[0]


def test_invalid_tokens_in_the_reference_words() -> None:
    good = _activation(EXPORTER, _pub(IMPORTER))
    bad = "activation token doesn't match account"
    cases = {
        good[:-3] + "AAA": 'import "svc.a" contains an invalid activation token',
        _activation(OTHER, _pub(IMPORTER)): f'{bad} for import "svc.a"',
        _activation(EXPORTER, _pub(OTHER)): f'{bad} it is being included in, "svc.a"',
        _activation(EXPORTER, _pub(IMPORTER), "other"):
            'activation token import subject "other" doesn\'t match import "svc.a"',
        _activation(EXPORTER, _pub(IMPORTER), kind="stream"):
            "mismatch between token import type stream and type of import service",
    }  # fmt: skip
    for token, words in cases.items():
        importer = _importer({"subject": "svc.a", "type": "service", "token": token})
        assert invalid_imports(importer) == [words]
    assert invalid_imports(_importer({"subject": "svc.a", "type": "service", "token": good})) == []


def test_tiered_limits() -> None:
    tiers = {"R1": {"streams": 2, "disk_storage": 100, "mem_storage": 0}, "R3": {"consumer": 4}}
    limits = account_limits(_account(EXPORTER, limits={"tiered_limits": tiers})).jetstream
    assert limits is not None and limits.max_streams == 0
    assert [(n, t.max_streams, t.max_file, t.max_consumers) for n, t in limits.tiers] == [
        (1, 2, 100, -1),
        (3, -1, -1, 4),
    ]


def _at(zone: str, hour: int, minute: int = 0) -> float:
    day = datetime.datetime(2026, 6, 1, hour, minute, tzinfo=zoneinfo.ZoneInfo(zone))
    return day.timestamp()


def test_connect_windows() -> None:
    limits = {"times": [{"start": "08:00:00", "end": "18:00:00"}], "times_location": "Europe/Paris"}
    assert window_end(limits, _at("Europe/Paris", 12)) == _at("Europe/Paris", 18)
    assert window_end(limits, _at("Europe/Paris", 19)) is None
    assert window_end({}, 0) == 0.0
    overnight = {"times": [{"start": "22:00:00", "end": "02:00:00"}], "times_location": "UTC"}
    assert window_end(overnight, _at("UTC", 23)) == _at("UTC", 2) + 86400
    assert window_end(overnight, _at("UTC", 1)) is None  # the reference's rule
    assert window_end({**limits, "times_location": "Nowhere/Else"}, _at("UTC", 12)) is None


def test_response_permissions(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    permits = Responses(2, 1.0)
    assert not permits.allows(b"reply")
    permits.received(b"reply")
    assert permits.allows(b"reply") and permits.allows(b"reply")
    assert not permits.allows(b"reply")  # the third
    permits.received(b"late")
    now[0] += 1.5
    assert not permits.allows(b"late")
    defaults = Responses(0, 0)
    assert (defaults.max_msgs, defaults.ttl) == (1, 120.0)
    unbounded = Responses(-1, -1)  # a config's negative values: no bound
    unbounded.received(b"any")
    now[0] += 10_000
    assert all(unbounded.allows(b"any") for _ in range(10))


def test_a_preloaded_jwt_with_a_bad_token_is_taken_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    importer = _importer({"subject": "svc.a", "type": "service", "token": "not.a.jwt"})
    path = tmp_path / "server.conf"
    path.write_text(
        f"operator: {_operator_jwt()}\nresolver: MEMORY\n"
        f"resolver_preload: {{ {importer.subject}: {importer.token} }}\n"
    )
    opts = load_config(str(path))
    validate_options(opts)
    with caplog.at_level(logging.WARNING, logger="jetlake"):
        resolver = Resolver(opts)
    assert resolver.store.get(importer.subject) is not None
    assert caplog.messages == [
        f"Account [{importer.subject}] has validation issues:",
        '  - import "svc.a" contains an invalid activation token',
    ]


def test_operator_mode_refuses_mappings(tmp_path: Path) -> None:
    """Top-level mappings belong to the global account, which operator mode has not."""
    path = tmp_path / "server.conf"
    path.write_text(f"operator: {_operator_jwt()}\nresolver: MEMORY\nmappings {{ a: b }}\n")
    with pytest.raises(ConfigError, match="operators do not allow Accounts to be configured"):
        validate_options(load_config(str(path)))


async def test_a_stopped_full_resolver_asks_the_cluster_no_more(tmp_path: Path) -> None:
    """A cluster's full resolver asks its peers every `interval`; a shut server must not."""
    path = tmp_path / "server.conf"
    path.write_text(
        f'operator: {_operator_jwt()}\nresolver: {{ type: full, dir: "{tmp_path / "jwt"}" }}\n'
    )
    opts = load_config(str(path))
    validate_options(opts)
    resolver = Resolver(opts)
    resolver._every()  # as `start` does in a cluster
    timer = resolver._periodic
    assert timer is not None and not timer.cancelled()
    resolver.stop()
    assert timer.cancelled() and resolver._periodic is None
