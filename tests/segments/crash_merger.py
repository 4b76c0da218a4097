"""Child process of test_merge_crash: merges, and stops dead before its N-th file operation.

At the chosen rename or unlink it prints `step N` and blocks reading stdin until the
parent kills it with SIGKILL, so the kill lands at an exact point of the merge (no
timing involved); past the last operation it prints `done` and blocks the same way.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from log.segments import FileStore, SegmentConfig
from tests.segments.conftest import msgs

CONFIG = SegmentConfig(merge_min_segments=4)
MARK = 20  # the lake has the first 4 segments (seqs 1..20)
DELETED = (7, 12)


def build(path: Path) -> None:
    """6 sealed segments of 5 messages, 2 of them deleted, and an active one of 3."""
    store = FileStore(path, name="M", config=CONFIG)
    store.hold_for_lake(0)
    for k in range(6):
        store.append(msgs(["a", "b", "c", "a", "b"], ts=k * 100))
        store.seal(older_than_ns=10**19)
    store.append(msgs(["tail"] * 3, ts=600))
    for seq in DELETED:
        store.remove(seq)
    store.close()


def stop_before(step: int) -> None:
    """Make the `step`-th os.replace/os.unlink from now on announce itself and block.

    Only the merge's own operations count: a summary written on a worker thread
    (a cache, checked when read) would make the count depend on timing.
    """
    count = 0

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def op(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            if threading.current_thread() is not threading.main_thread():
                return real(*args, **kwargs)
            if count == step:
                print(f"step {step}", flush=True)
                sys.stdin.read()  # until SIGKILL
            count += 1
            return real(*args, **kwargs)

        return op

    os.replace = wrap(os.replace)  # type: ignore[assignment]
    os.unlink = wrap(os.unlink)  # type: ignore[assignment]


def main(path: str, step: int) -> None:
    store = FileStore(path, name="M", config=CONFIG)
    store.hold_for_lake(MARK)
    stop_before(step)
    store.merge_small()
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
