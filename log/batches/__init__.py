"""Batch publish: atomic batches staged until their commit (`atomic`) and proposed as one
entry (`commit`), fast batches checked and proposed message by message under a flow of
acks (`fast`), and the server-wide limit on the batches open at once (`limits`)."""
