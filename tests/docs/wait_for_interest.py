"""Wait until a server's /connz lists a subscription on a subject (the tour's background
`nats sub`), polling with a deadline: a reader starts the subscriber before publishing,
a script must see it subscribed. Usage: python wait_for_interest.py MONITOR_URL SUBJECT"""

from __future__ import annotations

import json
import sys
import time
import urllib.request

DEADLINE = 30.0


def subscribed(monitor: str, subject: str) -> bool:
    with urllib.request.urlopen(f"{monitor}/connz?subs=1", timeout=5) as answer:
        connz = json.load(answer)
    return any(subject in (c.get("subscriptions_list") or []) for c in connz["connections"])


def main(monitor: str, subject: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not subscribed(monitor, subject):
        if time.monotonic() > deadline:
            sys.exit(f"no subscription on {subject!r} at {monitor} within {DEADLINE} s")
        time.sleep(0.05)


if __name__ == "__main__":
    main(*sys.argv[1:3])
