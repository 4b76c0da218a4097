"""The compiled fast path of the client protocol, chosen once at import.

uvicorn's model: `nats.py` is the reference implementation and the fallback, and
`jetlake_native` (the Rust crate in native/, built by `make`) is used when it is
installed. It parses the per-message operations and frames MSG/HMSG itself and
leaves every rare control line to the reference codec, so the two cannot drift on
CONNECT, SUB or UNSUB. `JETLAKE_NATIVE=0` picks the pure codec, to measure either.

Its fast path also routes: a PUB whose subject the sublist's `Routes` table knows
is framed into the subscribers' `Outlet`s inside `receive` (see native/src/lib.rs);
the pure path routes every PUB in Python, and is the reference for the bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType

from ingest.parser import nats
from ingest.parser.outlet import Outlet


def _load() -> ModuleType | None:
    if os.environ.get("JETLAKE_NATIVE", "1") == "0":
        return None
    try:
        import jetlake_native
    except ImportError:
        return None
    return jetlake_native


native = _load()
NAME = "native (Rust)" if native is not None else "pure Python"

encode_msg = native.encode_msg if native is not None else nats.encode_msg
encode_hmsg = native.encode_hmsg if native is not None else nats.encode_hmsg
# The operation a run of plain acks comes as (the pure codec routes each ack instead).
AckRun: type | None = native.AckRun if native is not None else None
# And a run of plain PUBs to a subject only a stream takes.
PubRun: type | None = native.PubRun if native is not None else None


def server_codec(*, max_control_line: int, max_payload: int) -> nats.ServerCodec:
    """A codec for one client connection; the compiled one wraps a pure one it delegates to."""
    pure = nats.ServerCodec(max_control_line=max_control_line, max_payload=max_payload)
    if native is None:
        return pure
    return native.ServerCodec(pure, nats)  # type: ignore[no-any-return]


def outlet(owner: object, notify: Callable[[object], None]) -> Outlet:
    """A connection's output buffer; the compiled one calls `notify(owner)` when its fast
    path dirties it."""
    if native is None:
        return Outlet()
    return native.Outlet(owner, notify)  # type: ignore[no-any-return]


def routes() -> object | None:
    """A sublist's table for the codec's fast path; None where there is no fast path."""
    return native.Routes() if native is not None else None
