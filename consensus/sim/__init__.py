"""The deterministic Raft simulator: seeded network, disk model, cluster, invariants."""
