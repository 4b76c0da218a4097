"""A consumer's deliveries from a peer, taken in runs on the client's server.

A consumer on another server sends a client here its messages as HMSGs routed on the
client's inbox, each with a header naming the subject to show (`shown_header`). Routed one
by one (`Server.route_from_peer`) each costs a match and a delivery in Python; a run of
them to one inbox, with that inbox's one receiver a plain client subscription, is framed
into the client's outlet in one pass instead. Anything else (several receivers, a
subscription checking permissions, traced or counting to an auto-unsubscribe) is left to
the one-by-one path, which decides as the reference does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ingest.parser import fast
from ingest.parser.routes import encode_rmsg
from ingest.server.subscription import Subscription

if TYPE_CHECKING:
    from ingest.parser.routes import RMsg
    from log.consumers.wire import Deliveries

SHOWN_PREFIX = b"NATS/1.0\r\nJetlake-Shown: "


def shown_header(shown: bytes, hdr: bytes | None) -> bytes:
    """A header block naming the subject to show, the message's own block (if any) after
    it whole, status line included: only the receiving jetlake reads this block."""
    return SHOWN_PREFIX + shown + b"\r\n" + (hdr or b"")


def split_shown(hdr: bytes) -> tuple[bytes, bytes | None]:
    """Inverse of `shown_header`: the subject, and the message's own block or None."""
    end = hdr.index(b"\r\n", len(SHOWN_PREFIX))
    return hdr[len(SHOWN_PREFIX) : end], hdr[end + 2 :] or None


def frame_for_peer(account: bytes, routed: bytes, run: Deliveries) -> tuple[bytes, int]:
    """A consumer's run to an inbox on a peer as the HMSGs that carry it (each shown under
    its own subject), and its header and payload bytes; framed by the compiled extension
    when it is there."""
    if fast.native is not None:
        prefix = run.ack_prefix
        return fast.native.frame_routed_run(account, routed, prefix, SHOWN_PREFIX, run.msgs)
    parts, size = [], 0
    for shown, reply, hdr, payload in run.wire():
        parts.append(encode_rmsg(account, routed, reply, (), shown_header(shown, hdr), payload))
        size += len(payload) + (len(hdr) if hdr else 0)
    return b"".join(parts), size


def is_delivery(msg: RMsg) -> bool:
    """Whether a routed message is a consumer's delivery (its header block names the
    subject to show) without queue groups to serve."""
    hdr = msg.hdr
    return hdr is not None and not msg.queues and hdr.startswith(SHOWN_PREFIX)


def delivery_run_end(ops: list[Any], at: int) -> int:
    """Where a run of deliveries to the inbox of `ops[at]` (a delivery) ends: same
    account, same routed subject."""
    first = ops[at]
    end = at + 1
    while end < len(ops):
        op = ops[end]
        if type(op) is not type(first) or not is_delivery(op):
            break
        if op.subject != first.subject or op.account != first.account:
            break
        end += 1
    return end


def sole_receiver(sublist: Any, inbox: bytes) -> Subscription | None:
    """The one client subscription that takes what is routed on `inbox`, if it may be
    framed without Python deciding each message; counted as one match only then (the
    one-by-one path counts its own)."""
    hits = sublist.cache_hits
    match = sublist.match(inbox)
    sub = match.plain[0] if len(match.plain) == 1 else None
    if type(sub) is not Subscription or sub.filtered or sub.max_msgs or sub.conn.trace:
        sublist.matches -= 1
        sublist.cache_hits = hits
        return None
    return sub


def frame_deliveries(sub: Subscription, msgs: list[RMsg]) -> tuple[int, int]:
    """Frame each delivery under its shown subject, its own header block (if any) kept,
    into the subscription's outlet. Returns the header and payload bytes as routed and
    as delivered (without the shown subject's header)."""
    conn = sub.conn
    outlet = conn.outlet
    sid = sub.sid
    clean = False
    routed = delivered = 0
    for msg in msgs:
        hdr = msg.hdr
        assert hdr is not None
        shown, own = split_shown(hdr)
        payload = msg.payload
        clean |= outlet.msg(shown, sid, msg.reply, own, payload)
        routed += len(payload) + len(hdr)
        delivered += len(payload) + (len(own) if own else 0)
    if clean:
        conn.server.mark_dirty(conn)
    sub._delivered += len(msgs)  # as `deliver` counts each
    return routed, delivered
