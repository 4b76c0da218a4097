"""WebSocket: NATS and MQTT clients over RFC 6455, for browsers and the edge."""
