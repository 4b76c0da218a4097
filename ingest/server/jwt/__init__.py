"""Decentralized authentication without I/O: nkey signatures over the server's nonce,
and the operator → account → user chain of JWTs that `nsc` issues.

The asyncio side (`ingest.server.auth`, the resolver's system subscriptions) hands
these functions bytes and clocks, so every rule here is tested without a socket.
"""
