"""An account given JetStream while a three-server cluster runs, the reference and jetlake
alike: by an account JWT pushed with `nsc push` (full resolvers), and by a config reload
of the account's `jetstream` on every server; its R3 stream then runs on all three. A
reload that takes it away leaves the account without JetStream and keeps the streams,
which on jetlake come back with their messages when it is enabled again."""

from __future__ import annotations

import signal
from pathlib import Path

import nats
import pytest
from nats.js.errors import ServiceUnavailableError

from tests.e2e.test_reload import reloads
from tests.jscluster.support import connect, eventually, js_cluster, start_js_cluster, stop
from tests.support.nsc import Nsc

pytestmark = [pytest.mark.soak, pytest.mark.timeout(120)]  # two clusters per test: ~30 s


async def replicated(js: object, name: str, messages: int) -> bool:
    info = await js.stream_info(name)  # type: ignore[attr-defined]
    replicas = info.cluster.replicas or [] if info.cluster else []
    return (
        info.state.messages == messages and len(replicas) == 2 and all(r.current for r in replicas)
    )


async def test_a_pushed_account_gets_jetstream_on_every_server(
    server_kind: str, tmp_path: Path
) -> None:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "B")
    nsc.run("add", "user", "-a", "B", "alice")
    own = [nsc.full_config(tmp_path / f"jwt{i}") for i in range(3)]
    servers = start_js_cluster(server_kind, tmp_path, 3, own=own)
    try:
        nsc.run("edit", "operator", "--account-jwt-server-url", servers[0].url)
        nsc.run("edit", "account", "B", "--js-mem-storage", "-1", "--js-disk-storage", "-1")
        assert nsc.run("push", "-a", "B").count("jwt updated") == 3
        nc = await connect(servers, user_credentials=str(nsc.creds("B", "alice")))
        try:
            js = nc.jetstream(timeout=2)

            async def created() -> object:
                return await js.add_stream(name="PUSHED", subjects=["pushed"], num_replicas=3)

            await eventually(created, "an R3 stream of the pushed account")
            for i in range(5):
                await js.publish("pushed", str(i).encode())
            await eventually(lambda: replicated(js, "PUSHED", 5), "three current replicas")
        finally:
            await nc.close()
    finally:
        stop(servers)


ACCOUNTS = """
accounts {
  A { users [ {user: a, password: a} ] }
}
"""


def reload_all(servers: list, before: str, after: str, count: int) -> None:  # type: ignore[type-arg]
    for server in servers:
        assert server.config_path is not None
        text = server.config_path.read_text()
        assert before in text
        server.config_path.write_text(text.replace(before, after))
        server.send_signal(signal.SIGHUP)
    for server in servers:
        reloads(server, count)


async def test_a_reload_switches_an_accounts_jetstream_in_a_cluster(
    server_kind: str, tmp_path: Path
) -> None:
    plain, enabled = "password: a} ] }", "password: a} ], jetstream: enabled }"
    # The reference's reload checks the file alone: the names must be in it.
    own = [f"server_name: S{i}\ncluster {{ pool_size: -1, name: C }}\n" for i in range(3)]
    async with js_cluster(
        server_kind, tmp_path, config=ACCOUNTS, own=own, user="a", password="a"
    ) as c:

        async def switched_off() -> bool:
            """No JetStream: jetlake answers 10039, the reference's cluster not at all."""
            try:
                await c.js.account_info()
            except ServiceUnavailableError as exc:
                return exc.err_code == 10039
            except nats.errors.TimeoutError:
                return True
            return False

        assert await switched_off()
        reload_all(c.servers, plain, enabled, 1)
        await c.add_stream("ON", ["on"], replicas=3)
        for i in range(3):
            await c.js.publish("on", str(i).encode())
        await eventually(lambda: replicated(c.js, "ON", 3), "three current replicas")
        reload_all(c.servers, enabled, plain, 2)
        await eventually(switched_off, "no JetStream once switched off")
        reload_all(c.servers, plain, enabled, 3)
        if server_kind == "nats-server":
            return  # it leaves the stream unanswered (seen for 20 s): jetlake brings it back
        await eventually(lambda: replicated(c.js, "ON", 3), "the stream back on all three")
        ack = await c.js.publish("on", b"again")
        assert ack.seq == 4
