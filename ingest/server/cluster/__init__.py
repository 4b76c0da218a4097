"""Core NATS clustering: route connections between servers, gossip, interest, forwarding.

`settings` is imported by the option parsers and must stay free of server code;
`Cluster` (in `mesh`) is built by the composition root when a cluster is configured.
"""
