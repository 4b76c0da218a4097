"""Config reload of a leaf's remotes, on both servers: a remote taken out of the file
has its link closed and is not dialled again, one put in is dialled; any other change
of `leafnodes {}` is refused in the reference's words and the old configuration stays."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.conftest import MakeServer
from tests.leafnode.conftest import leaf_port, leafz
from tests.support.cluster import poll
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
async def test_reload_replaces_a_leafs_remote(make_server: MakeServer, tmp_path: Path) -> None:
    hubs = [
        make_server("-m", "-1", config="leafnodes { listen: 127.0.0.1:-1 }\n") for _ in range(2)
    ]
    first, second = hubs
    leaf = make_server("-m", "-1", config=_remotes(first))
    poll(lambda: _links(first) == 1, "the leaf linked to the first hub")

    _reload(leaf, _remotes(second))
    await leaf.wait_for_log_async(RELOADED)
    url = f"nats-leaf://127.0.0.1:{leaf_port(first)}"
    assert leaf.find_log(
        re.escape(f'Reloaded: LeafNode Remote urls=["{url}"], account="$G" removed')
    )
    poll(lambda: _links(second) == 1, "the leaf linked to the second hub")
    poll(lambda: _links(first) == 0, "the first hub's link closed")

    # A remote that stays may not change: refused, the link to the second hub kept.
    _reload(leaf, _remotes(second, deny=', deny_exports: ["secret"]'))
    found = await leaf.wait_for_log_async(FAILED + r"LeafNode: remote (.*)")
    assert found.group(1).startswith(f'urls=["nats-leaf://127.0.0.1:{leaf_port(second)}"]')
    assert found.group(1).endswith(': field "DenyExports": old=[], new=[secret]')
    assert _links(second) == 1 and _links(first) == 0
