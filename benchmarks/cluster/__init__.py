"""Benchmarks on three servers of each kind: the R3 rows and the servers they start
(`rows`), the many-streams row (`scale`), and the CPU per message of each server of an
R3 cluster, by stage (`cpu`, run on its own: ``python -m benchmarks.cluster.cpu``)."""
