"""The ack floor: the highest delivery below which everything is acknowledged.

Pure, beside the consumer that owns the pending map, so the reference's rule
(advance only from the floor itself, up to the next gap) is read in one place.
"""

from __future__ import annotations

_PROBE = 8  # seqs after an acked one looked up before walking the pending dict


def moved_floor(
    pending: dict[int, tuple[int, int]],
    adflr: int,
    dseq: int,
    sseq: int,
    next_dseq: int,
    next_sseq: int,
) -> tuple[int, int] | None:
    """The floor (delivery seq, stream seq) after acking `dseq`/`sseq`, None if it stays.

    `pending` maps stream seq -> (delivery seq, ts) of what is still unacknowledged;
    `next_dseq`/`next_sseq` are the next to be sent. The next seqs are probed first:
    the dict's front holds a hole per in-order ack.
    """
    if not pending:
        return next_dseq - 1, next_sseq - 1
    if dseq != adflr + 1:
        return None
    nxt = pending.get(sseq + 1)
    if nxt is not None:  # in-order acks of a contiguous run: no loop
        return nxt[0] - 1, sseq
    probe_end = min(sseq + 1 + _PROBE, next_sseq)  # nothing from next_sseq on was sent
    for seq in range(sseq + 2, probe_end):
        p = pending.get(seq)
        if p is not None:
            return p[0] - 1, seq - 1
    if probe_end < next_sseq:
        for seq, (pending_dseq, _) in pending.items():
            if seq > sseq:
                return pending_dseq - 1, seq - 1
    return dseq, sseq
