"""The TLS contexts of `leafnodes {}`: the listener's and each remote's, built at start
and again at every config reload (certificates are read anew even when the file names
are unchanged, as the reference does), so an error names the file at fault."""

from __future__ import annotations

import os
import ssl
from typing import TYPE_CHECKING

from ingest.server.leafnode.settings import LeafnodeConfig, RemoteLeaf
from ingest.server.tls import make_client_context, make_server_context

if TYPE_CHECKING:
    from ingest.server.settings import TLSConfig

Contexts = dict[RemoteLeaf | None, ssl.SSLContext]  # None: the listener's


def build_contexts(config: LeafnodeConfig) -> Contexts:
    """Every configured context; ValueError naming the file that cannot be read."""
    out: Contexts = {}
    if config.tls is not None:
        out[None] = _built(config.tls, server=True)
    for remote in config.remotes:
        if remote.tls is not None:
            out[remote] = _built(remote.tls, server=False)
    return out


def _built(tls: TLSConfig, *, server: bool) -> ssl.SSLContext:
    for path in (tls.cert_file, tls.key_file, tls.ca_file):
        if path and not os.path.isfile(path):
            raise ValueError(f"leafnode tls: open {path}: no such file or directory")
    try:
        return make_server_context(tls) if server else make_client_context(tls)
    except ssl.SSLError as exc:
        files = ", ".join(p for p in (tls.cert_file, tls.key_file, tls.ca_file) if p)
        raise ValueError(f"leafnode tls: cannot load {files}: {exc}") from None
