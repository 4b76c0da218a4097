"""The system account's services every other account imports, as on the reference.

A user of any account may ask `$SYS.REQ.SERVER.PING.CONNZ` or
`$SYS.REQ.ACCOUNT.PING.CONNZ` (its own account's connections) and
`$SYS.REQ.ACCOUNT.PING.STATZ` (its own account's figures) without being a system
user: each is a service import from the system account, mapped to
`$SYS.REQ.ACCOUNT.<account>.CONNZ` or `.STATZ`, which every server of the cluster
answers. These imports live apart from the configured ones, so a reload that rebuilds
those leaves them be; `$SYS.REQ.USER.INFO` is answered in each account directly
(`system.py`) and only listed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ingest.server.accounts.settings import SINGLETON, STREAM, Export, Import

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.accounts.sharing import Sharing
    from ingest.server.server import Server

ACCOUNT_REQUEST = "$SYS.REQ.ACCOUNT.{}.{}"
_ACCOUNT_TOKEN = 4  # the importer's name in `$SYS.REQ.ACCOUNT.<account>.…`
# The exports the reference's system account adds for them, as its INFO lists them.
EXPORTS = (
    Export(service=True, subject=ACCOUNT_REQUEST.format("*", "CONNZ"), response_type=STREAM,
           account_token_position=_ACCOUNT_TOKEN),
    Export(service=True, subject=ACCOUNT_REQUEST.format("*", "STATZ"), response_type=STREAM,
           account_token_position=_ACCOUNT_TOKEN),
    Export(service=True, subject="$SYS.REQ.USER.*.INFO", response_type=SINGLETON),
)  # fmt: skip
_CONNZ, _STATZ, _USER_INFO = EXPORTS


def imports(account: str, system: str) -> list[tuple[Import, Export]]:
    """The system imports of `account`: (import, the export that allows it); the system
    account itself has only its user info."""

    def service(subject: str, local: str) -> Import:
        return Import(service=True, account=system, subject=subject, to=local)

    user_info = (service(f"$SYS.REQ.USER.{account}.INFO", "$SYS.REQ.USER.INFO"), _USER_INFO)
    if account == system:
        return [user_info]
    connz = ACCOUNT_REQUEST.format(account, "CONNZ")
    return [
        (service(connz, "$SYS.REQ.ACCOUNT.PING.CONNZ"), _CONNZ),
        (service(connz, "$SYS.REQ.SERVER.PING.CONNZ"), _CONNZ),
        (service(ACCOUNT_REQUEST.format(account, "STATZ"), "$SYS.REQ.ACCOUNT.PING.STATZ"), _STATZ),
        user_info,
    ]


class SystemImports:
    """The imports of every account but the system one, now and as accounts appear."""

    def __init__(self, server: Server) -> None:
        from ingest.server.accounts.sharing import Sharing

        self._server = server
        self._sharing: Sharing = Sharing(server, ())

    def start(self) -> None:
        self._server.accounts.every(self._serve)

    def _serve(self, account: Account) -> None:
        system = self._server.accounts.system_account
        if account is system:
            return
        for imp, export in imports(account.name, system.name):
            if export is not _USER_INFO:  # answered in the account itself
                self._sharing.add(account, system, imp, export)
