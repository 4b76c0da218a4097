"""`$SYS.REQ.USER.INFO`: who the requesting connection is, as the reference tells it.

Every account of nats-server imports this service, so any client may ask which
user and account it is bound to and what it may publish and subscribe to;
`nats account info` prints the answer. The answer is about the connection that
sent the request, which the router names while it routes (`Server.sender`), and
goes back in that connection's account.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ingest.server.auth.authenticator import Grant
from ingest.server.version import VERSION
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.server import Server

USER_INFO = "$SYS.REQ.USER.INFO"
_JETSTREAM_ENABLED = 1  # the reference's capability flag bit


class SystemServices:
    def __init__(self, server: Server) -> None:
        self._server = server
        self._seq = 0

    def start(self) -> None:
        self._server.serve_everywhere(USER_INFO, self._user_info)

    def _user_info(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not reply:
            return
        sender = self._server.sender
        grant = sender.grant if sender is not None else Grant()
        info: dict[str, Any] = {
            "user": grant.user,
            "account": grant.account,
            "account_name": grant.account,
        }
        permissions = _permissions(grant)
        if permissions:
            info["permissions"] = permissions
        body = {"server": self.envelope(), "data": info}
        account = sender.account if sender is not None else None  # answered where asked
        data = json.dumps(body, separators=(",", ":")).encode()
        self._server.publish(reply, None, None, data, account=account)

    def envelope(self) -> dict[str, Any]:
        """The server block every system message carries (sequence and time of this one)."""
        server = self._server
        self._seq += 1
        js = bool(server.opts.jetstream.enabled)
        cluster = {"cluster": server.cluster.name} if server.cluster is not None else {}
        return {
            "name": server.server_name,
            "host": server.opts.host,
            "id": server.server_id,
            **cluster,
            "ver": VERSION,
            "jetstream": js,
            "flags": _JETSTREAM_ENABLED if js else 0,
            "seq": self._seq,
            "time": rfc3339(now_ns()),
        }


def _permissions(grant: Grant) -> dict[str, dict[str, Any]]:
    """Only the directions and lists that restrict anything, as the reference omits the
    rest; with response permissions, both directions and the `responses` (ttl in ns)."""
    out: dict[str, dict[str, Any]] = {}
    responses = grant.responses
    for direction, allow, deny in (
        ("publish", grant.pub_allow, grant.pub_deny),
        ("subscribe", grant.sub_allow, grant.sub_deny),
    ):
        lists = {k: list(v) for k, v in (("allow", allow), ("deny", deny)) if v}
        if lists or responses is not None:
            out[direction] = lists
    if responses is not None:
        out["responses"] = {"max": responses.max_msgs, "ttl": round(responses.ttl * 1e9)}
    return out
