"""Side-by-side benchmarks of jetlake against the reference nats-server.

Figures only mean something as ratios against the reference measured on the same
machine in the same run, so every workload runs against both servers, one at a time.
Entry point: ``benchmarks.run.main`` (``jetlake bench`` or ``python -m benchmarks.run``).
"""
