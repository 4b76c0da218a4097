"""The cluster usage exchange without sockets: the reference's binary record both ways,
what the other servers' figures add to an account's usage, and the 10002 arithmetic
(every replica counted, a message once per replica, a tier's limit per replica)."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ingest.server.accounts import js_limits
from ingest.server.accounts.settings import JetStreamLimits
from ingest.server.jetstream.cluster.usage import UsageExchange, decode, encode
from log.segments.api import FILE_OVERHEAD


def test_the_record_round_trips_and_reads_the_references_layout() -> None:
    tiers = {"R1": (10, 20), "R3": (0, 3000)}
    data = encode(tiers, api_total=7, api_errors=1)
    # The first record: memory, storage, API total and errors, extra tiers, name length.
    assert struct.unpack_from("<qqQQIQ", data) == (10, 20, 7, 1, 1, 2)
    assert data[44:46] == b"R1"
    assert decode(data) == tiers
    assert decode(encode({"": (5, 6)})) == {"": (5, 6)}
    assert decode(struct.pack("<qqQQ", 5, 6, 0, 0)) == {"": (5, 6)}  # an older server's


@pytest.mark.parametrize("data", [b"", b"\x00" * 31, encode({"R1": (1, 2)})[:45]])
def test_a_malformed_record_is_ignored(data: bytes) -> None:
    assert decode(data) is None


def exchange() -> UsageExchange:
    server = SimpleNamespace(server_id="ME")
    return UsageExchange(cast(Any, server))


def test_the_other_servers_figures_are_summed_by_tier() -> None:
    usage = exchange()
    usage._on_update("$JSC.ARU.A.P1", None, None, encode({"R1": (1, 10), "R3": (0, 300)}))
    usage._on_update("$JSC.ARU.A.P2", None, None, encode({"R3": (0, 300)}))
    usage._on_update("$JSC.ARU.A.ME", None, None, encode({"R3": (0, 999)}))  # its own
    usage._on_update("$JSC.ARU.B.P1", None, None, encode({"": (0, 5)}))
    usage._on_update("$JSC.ARU.A.P3", None, None, b"junk")
    assert usage.elsewhere("A", 3) == (0, 600)
    assert usage.elsewhere("A", 1) == (1, 10)
    assert usage.elsewhere("A", 0) == (1, 610)
    assert usage.elsewhere("B", 0) == (0, 5)
    usage._on_update("$JSC.ARU.A.P2", None, None, encode({"R3": (0, 100)}))  # newer wins
    assert usage.elsewhere("A", 3) == (0, 400)


class Engine:
    """Just what `js_limits.limited` asks of an engine."""

    def __init__(self, limits: JetStreamLimits, stored: int) -> None:
        self.limits = limits
        self.stored = stored
        self.acks: list[bytes] = []
        self.messaging = SimpleNamespace(publish=lambda r, s, h, body: self.acks.append(body))

    def usage(self, replicas: int = 0) -> dict[str, int]:
        return {"memory": 0, "storage": self.stored}


def stream(replicas: int) -> Any:
    config = SimpleNamespace(num_replicas=replicas, storage="file", no_ack=False)
    store = SimpleNamespace(overhead=FILE_OVERHEAD)
    return SimpleNamespace(config=config, store=store, name="U")


@pytest.mark.parametrize(
    ("limits", "stored", "accepted"),
    [
        (JetStreamLimits(max_file=3300), 3000, True),  # 3000 + 3 x 100: just fits
        (JetStreamLimits(max_file=3299), 3000, False),
        (JetStreamLimits(max_file=3300), 3001, False),
        # A tier's limit is per replica: 1100 x 3 bounds an R3 stream's 3000 + 300.
        (JetStreamLimits(tiers=((3, JetStreamLimits(max_file=1100)),)), 3000, True),
        (JetStreamLimits(tiers=((3, JetStreamLimits(max_file=1099)),)), 3000, False),
    ],
)
def test_a_message_counts_once_per_replica(
    limits: JetStreamLimits, stored: int, accepted: bool
) -> None:
    engine = Engine(limits, stored)
    taken: list[str] = []
    checked, _ = js_limits.limited(cast(Any, engine), stream(3), lambda s, r, h, d: taken.append(s))
    checked("u", "reply", None, b"x" * (100 - FILE_OVERHEAD.base - 1))  # 100 bytes stored
    assert (taken == ["u"]) is accepted
    assert bool(engine.acks) is not accepted


async def test_a_servers_record_carries_the_api_requests_it_answered() -> None:
    """What an observer of `$JSC.ARU` reads: the account's bytes and API counts here, sent
    again when only the API counts changed."""
    api = SimpleNamespace(total=7, errors=2)
    engine = SimpleNamespace(
        account="A", cluster=object(), limits=None, api=api, elsewhere=None,
        local_usage=lambda replicas: {"memory": 0, "storage": 10},
    )  # fmt: skip
    sent: list[tuple[str, bytes]] = []
    system = SimpleNamespace(jetstream=None)

    class Accounts(list[Any]):
        system_account = system

    server = SimpleNamespace(
        server_id="ME",
        accounts=Accounts([SimpleNamespace(jetstream=engine), system]),
        publish=lambda subject, reply, hdr, data, account: sent.append((subject, data)),
    )
    usage = UsageExchange(cast(Any, server))
    usage._tick()
    api.total += 1
    usage._tick()
    usage.stop()
    assert [subject for subject, _ in sent] == ["$JSC.ARU.A.ME"] * 2
    assert [struct.unpack_from("<qqQQ", data) for _, data in sent] == [(0, 10, 7, 2), (0, 10, 8, 2)]
