"""Start-up checks of `mqtt { … }`, with the reference's words (scripts grep them)."""

from __future__ import annotations

from ingest.parser.conf import ConfigError
from ingest.server.auth.listener import (
    check_block_credentials,
    check_no_auth_user,
    server_users,
)
from ingest.server.settings import Options


def check_mqtt_options(opts: Options) -> None:
    """What the reference refuses to start with once the whole configuration is known."""
    mqtt = opts.mqtt
    if mqtt is None:
        return
    if opts.server_name is None and opts.cluster is not None:
        raise ConfigError("mqtt requires server name to be explicitly set")
    check_no_auth_user(mqtt.no_auth_user, server_users(opts))
    check_block_credentials("mqtt", mqtt, server_users(opts))
    if mqtt.ack_wait < 0:
        raise ConfigError("ack wait must be a positive value")
    if mqtt.js_api_timeout < 0:
        raise ConfigError("JS API timeout must be a positive value")
    if not opts.jetstream.enabled and opts.cluster is None:
        raise ConfigError("mqtt requires JetStream to be enabled if running in standalone mode")
