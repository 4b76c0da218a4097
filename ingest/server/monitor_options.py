"""A `$SYS.REQ.SERVER…` request's JSON options as the monitoring endpoint's query.

The reference's requests carry its option structs (`nats server report connections`
sends `{"subscriptions": true, "state": 0, "sort": "", …}`), whose field names and
values differ from the HTTP endpoint's parameters (`subs=1`, `state=open`); zero
values mean "the default". Keys this table does not name pass as they are.
"""

from __future__ import annotations

from typing import Any

# JSON field -> query parameter, by endpoint.
_RENAMED: dict[str, dict[str, str]] = {
    "/connz": {"subscriptions": "subs"},
    "/subsz": {"subscriptions": "subs", "account": "acc"},
    "/leafz": {"subscriptions": "subs", "account": "acc"},
    "/routez": {"subscriptions": "subs"},
}
_STATES = {0: "open", 1: "closed", 2: "all"}  # the reference's ConnState


def query(path: str, options: dict[str, Any]) -> dict[str, list[str]]:
    renamed = _RENAMED.get(path, {})
    out: dict[str, list[str]] = {}
    for key, value in options.items():
        if key == "subscriptions_detail":
            if value:
                out["subs"] = ["detail"]
            continue
        if key == "state" and path == "/connz" and isinstance(value, int):
            value = _STATES.get(value, str(value))
        if value is None or value is False or value == "" or (type(value) is int and value == 0):
            continue
        name = renamed.get(key, key)
        if name == "subs" and "subs" in out:
            continue  # detail asked for too
        out[name] = [str(value).lower() if isinstance(value, bool) else str(value)]
    return out
