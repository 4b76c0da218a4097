"""A JetStream stream: its rules and proposals (`stream`, `publishing`), the entries its
replication group carries (`entries`), their apply to the store (`apply`), its state as
the API reports it (`state`) and the snapshot a new member starts from (`snapshot`)."""
