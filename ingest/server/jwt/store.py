"""The account JWTs a server holds, each verified against the trusted operators.

Both resolvers keep one: `MEMORY` fills it from `resolver_preload`, `full` also from
its directory and from the updates pushed to it. A JWT replaces the one held for its
account only when it is not older, so a replayed old JWT cannot undo a revocation.
"""

from __future__ import annotations

from collections.abc import Iterator

from ingest.server.jwt.claims import Claims, JWTError
from ingest.server.jwt.trust import Operators


class AccountStore:
    def __init__(self, operators: Operators) -> None:
        self.operators = operators
        self._accounts: dict[str, Claims] = {}

    def get(self, account: str) -> Claims | None:
        return self._accounts.get(account)

    def __iter__(self) -> Iterator[Claims]:
        return iter(self._accounts.values())

    def put(self, token: object, now: float, *, expected: str | None = None) -> Claims:
        """Verify and keep `token`; JWTError when it is not trusted, names another
        account than `expected`, or is older than the one held."""
        claims = self.operators.account(token, now)
        if expected is not None and claims.subject != expected:
            raise JWTError(f"JWT is for account {claims.subject}, not {expected}")
        held = self._accounts.get(claims.subject)
        if held is not None and held.issued_at > claims.issued_at:
            raise JWTError(f"JWT for account {claims.subject} is older than the one held")
        self._accounts[claims.subject] = claims
        return claims

    def remove(self, account: str) -> bool:
        return self._accounts.pop(account, None) is not None
