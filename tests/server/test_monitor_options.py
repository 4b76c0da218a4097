"""A `$SYS.REQ.SERVER…` request's JSON options as the endpoint's query parameters."""

from __future__ import annotations

from ingest.server.monitor_options import query

# What `nats server report connections` sends with `$SYS.REQ.SERVER.PING.CONNZ`.
REPORT_CONNECTIONS = {
    "sort": "", "auth": True, "subscriptions": True, "subscriptions_detail": False,
    "offset": 0, "limit": 1024, "cid": 0, "mqtt_client": "", "state": 0, "user": "",
    "acc": "", "filter_subject": "", "exact_match": True,
}  # fmt: skip


def test_the_clis_connz_options_become_the_endpoints_parameters() -> None:
    assert query("/connz", REPORT_CONNECTIONS) == {
        "auth": ["true"],
        "subs": ["true"],
        "limit": ["1024"],
        "state": ["open"],
        "exact_match": ["true"],
    }


def test_states_detail_and_renamed_fields() -> None:
    assert query("/connz", {"state": 1})["state"] == ["closed"]
    assert query("/connz", {"state": 2})["state"] == ["all"]
    assert query("/connz", {"subscriptions": True, "subscriptions_detail": True}) == {
        "subs": ["detail"]
    }
    assert query("/subsz", {"account": "APP", "subscriptions": True}) == {
        "acc": ["APP"],
        "subs": ["true"],
    }
    assert query("/leafz", {"account": "APP", "subscriptions": False}) == {"acc": ["APP"]}
    assert query("/varz", {"anything": "x"}) == {"anything": ["x"]}
