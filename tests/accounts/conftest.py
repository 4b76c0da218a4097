"""One server per kind for the account tests that share it: every account they need,
each test working in accounts of its own (sharing, limits, JetStream limits)."""

from __future__ import annotations

import pytest

from tests.conftest import KIND_IDS, ServerPool
from tests.support.servers import ServerProcess

CONFIG = """
accounts {
  A {
    users [ {user: a, password: a} ]
    jetstream: enabled
    exports [
      {stream: "a.>"}
      {stream: "secret.>", accounts: [C]}
      {service: "svc.>", response_type: stream}
      {service: "one.>", latency: {sampling: 100, subject: "lat.one"}}
      {service: "$JS.API.>", response_type: stream}
      {service: "$JS.ACK.>"}
      {stream: "deliver.>"}
    ]
  }
  B {
    users [ {user: b, password: b} ]
    jetstream: enabled
    imports [
      {stream: {account: A, subject: "a.>"}, prefix: "p"}
      {stream: {account: A, subject: "a.x"}, to: "mapped.x"}
      {service: {account: A, subject: "svc.x"}, to: "local.x"}
      {service: {account: A, subject: "one.>"}}
      {service: {account: A, subject: "$JS.API.>"}, to: "$JS.A.API.>"}
      {service: {account: A, subject: "$JS.ACK.>"}}
      {stream: {account: A, subject: "deliver.>"}}
    ]
  }
  C { users [ {user: c, password: c} ] }
  D { users [ {user: d, password: d}
              {user: dd, password: dd, permissions: {subscribe: {deny: "dny.bar"}}} ]
      jetstream: enabled }
  E {
    users [ {user: e, password: e} ]
    imports [ {service: {account: A, subject: "$JS.API.>"}} ]
  }
  WA { users [ {user: wa, password: wa} ]
       exports [ {stream: "ev.*.*"}, {service: "quote.*"} ] }
  WB { users [ {user: wb, password: wb} ]
       imports [ {stream: {account: WA, subject: "ev.*.*"}, to: "got.$2.$1"}
                 {service: {account: WA, subject: "quote.*"}, to: "quote_for.*"} ] }
  LIM {
    users [ {user: lim, password: lim} ]
    limits { max_connections: 2, max_subscriptions: 2, max_payload: 100, max_leafnodes: 1 }
  }
  QA { users [ {user: qa, password: qa} ]
       jetstream { max_mem: 1MB, max_file: 2MB, max_streams: 3, max_consumers: 1 } }
  QB { users [ {user: qb, password: qb} ]
       jetstream { max_file: 2MB, max_bytes_required: true, disk_max_stream_bytes: 1MB,
                   max_ack_pending: 10 } }
}
"""


@pytest.fixture
def shared(
    server_pool: ServerPool, server_kind: str, tmp_path_factory: pytest.TempPathFactory
) -> ServerProcess:
    store = tmp_path_factory.getbasetemp() / f"accounts-{KIND_IDS[server_kind]}"
    return server_pool.get(server_kind, "-js", "-sd", str(store), config=CONFIG)
