"""The versions this server reports (INFO, /varz, $SYS), at the bottom of the import
graph so that every part that reports them can import them."""

# The nats-server release whose protocol and JetStream API level (`log.config.API_LEVEL`)
# jetlake matches: clients gate features on it, so an older number hides what is there.
VERSION = "2.15.1"
JETLAKE_VERSION = "0.1.0"
