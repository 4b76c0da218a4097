"""A JetStream consumer's rules: its config, start position, delivery, acks and state."""
