"""Config reload of a leaf's remotes, on both servers: a remote taken out of the file
has its link closed and is not dialled again, one put (back) in is dialled; any other
change of `leafnodes {}` (but `tls` and `compression`: test_reload_tls) is refused in
the reference's words and the old configuration stays."""

from __future__ import annotations

import re
import signal

import pytest

from tests.conftest import MakeServer
from tests.leafnode.conftest import leaf_port, leafz
from tests.support.poll import poll
from tests.support.servers import ServerProcess

RELOADED = re.escape("Reloaded server configuration")
FAILED = re.escape("Failed to reload server configuration: config reload not supported for ")


def _remotes(*hubs: ServerProcess, deny: str = "") -> str:
    entries = ", ".join(
        f'{{ url: "nats-leaf://127.0.0.1:{leaf_port(hub)}"{deny} }}' for hub in hubs
    )
    return f"leafnodes {{ remotes: [ {entries} ] }}\n"


def _links(server: ServerProcess) -> int:
    return int(leafz(server)["leafnodes"])


def _reload(server: ServerProcess, text: str) -> None:
    assert server.config_path is not None
    server.config_path.write_text(text)
    server.send_signal(signal.SIGHUP)


@pytest.mark.timeout(60)
async def test_reload_removes_and_adds_a_leafs_remote(make_server: MakeServer) -> None:
    hub = make_server("-m", "-1", config="leafnodes { listen: 127.0.0.1:-1 }\n")
    leaf = make_server("-m", "-1", config=_remotes(hub))
    poll(lambda: _links(hub) == 1, "the leaf linked to the hub")

    _reload(leaf, _remotes())
    await leaf.wait_for_log_async(RELOADED)
    url = f"nats-leaf://127.0.0.1:{leaf_port(hub)}"
    assert leaf.find_log(
        re.escape(f'Reloaded: LeafNode Remote urls=["{url}"], account="$G" removed')
    )
    poll(lambda: _links(hub) == 0, "the link closed, not redialled")

    _reload(leaf, _remotes(hub))
    poll(lambda: _links(hub) == 1, "the remote put back dialled")

    # A remote that stays may not change: refused, its link kept.
    _reload(leaf, _remotes(hub, deny=', deny_exports: ["secret"]'))
    found = await leaf.wait_for_log_async(FAILED + r"LeafNode: remote (.*)")
    assert found.group(1) == (
        f'urls=["{url}"], account="$G": field "DenyExports": old=[], new=[secret]'
    )
    assert _links(hub) == 1
