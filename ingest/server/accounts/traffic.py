"""What clients published and were delivered, per account and over all accounts, the
closed ones' included.

A connection counts its own messages and bytes (connz shows them); the totals add
what connections that left counted, folded in as each leaves. The account's
`account_connections` event, STATSZ's `received_from_clients`/`sent_to_clients` and
/varz's `in_client_*`/`out_client_*` all read them. A leafnode link is not a client:
its traffic is the link's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account, Accounts

Figures = tuple[int, int, int, int]  # msgs in, bytes in, msgs out, bytes out
_NONE: Figures = (0, 0, 0, 0)
NAMES = ("in_client_msgs", "in_client_bytes", "out_client_msgs", "out_client_bytes")  # /varz's


def _is_leaf(conn: object) -> bool:
    from ingest.server.leafnode.connection import LeafConnection

    return isinstance(conn, LeafConnection)


class ClientTraffic:
    def __init__(self, accounts: Accounts) -> None:
        self._accounts = accounts
        self._closed: dict[str, Figures] = {}  # per account: its closed clients'
        accounts.on_disconnect.append(self._left)

    def of(self, account: Account) -> Figures:
        in_msgs, in_bytes, out_msgs, out_bytes = self._closed.get(account.name, _NONE)
        for client in account.clients:
            in_msgs, in_bytes = in_msgs + client.in_msgs, in_bytes + client.in_bytes
            out_msgs, out_bytes = out_msgs + client.out_msgs, out_bytes + client.out_bytes
        return in_msgs, in_bytes, out_msgs, out_bytes

    def totals(self) -> dict[str, Any]:
        """Every account's, as /varz names them."""
        sums = [0, 0, 0, 0]
        for account in self._accounts:
            for i, n in enumerate(self.of(account)):
                sums[i] += n
        return dict(zip(NAMES, sums, strict=True))

    def _left(self, conn: Any) -> None:
        if _is_leaf(conn):
            return
        name = conn.account.name
        in_msgs, in_bytes, out_msgs, out_bytes = self._closed.get(name, _NONE)
        self._closed[name] = (
            in_msgs + conn.in_msgs,
            in_bytes + conn.in_bytes,
            out_msgs + conn.out_msgs,
            out_bytes + conn.out_bytes,
        )
