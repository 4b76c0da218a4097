"""Child process of test_crash: appends and syncs forever, printing each synced last seq."""

from __future__ import annotations

import hashlib
import sys

from log.segments import FileStore, NewMsg, SegmentConfig


def payload(seq: int) -> bytes:
    return hashlib.sha256(b"%d" % seq).digest() * 4


def main(path: str) -> None:
    store = FileStore(path, name="C", config=SegmentConfig(max_msgs=500))
    last = store.state().last_seq
    while True:
        n = 1 + last % 50
        seqs = range(last + 1, last + n + 1)
        store.append([NewMsg(f"c.{s % 10}", b"NATS/1.0\r\n\r\n", payload(s), s) for s in seqs])
        store.sync()
        last += n
        print(last, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
