"""Start-up checks of `mqtt { … }`, with the reference's words (scripts grep them)."""

from __future__ import annotations

from ingest.parser.conf import ConfigError
from ingest.server.settings import Options


def check_mqtt_options(opts: Options) -> None:
    """What the reference refuses to start with once the whole configuration is known."""
    mqtt = opts.mqtt
    if mqtt is None:
        return
    if opts.server_name is None and opts.cluster is not None:
        raise ConfigError("mqtt requires server name to be explicitly set")
    if mqtt.no_auth_user is not None:
        if not opts.users:
            raise ConfigError(
                f'no_auth_user: "{mqtt.no_auth_user}" present, but users/nkeys are not defined'
            )
        if all(user.user != mqtt.no_auth_user for user in opts.users):
            raise ConfigError(
                f'no_auth_user: "{mqtt.no_auth_user}" not present as user or nkey in '
                "authorization block or account configuration"
            )
    if opts.users and mqtt.username:
        raise ConfigError(
            "mqtt authentication username not compatible with presence of users/nkeys"
        )
    if opts.users and mqtt.token:
        raise ConfigError("mqtt authentication token not compatible with presence of users/nkeys")
    if mqtt.ack_wait < 0:
        raise ConfigError("ack wait must be a positive value")
    if mqtt.js_api_timeout < 0:
        raise ConfigError("JS API timeout must be a positive value")
    if not opts.jetstream.enabled and opts.cluster is None:
        raise ConfigError("mqtt requires JetStream to be enabled if running in standalone mode")
