"""MQTT 3.1.1 beside NATS: the listener, its connections and sessions, the bridge to JetStream.

`listener.MQTTListener` is what the composition root starts when `mqtt {}` names a
port; everything MQTT keeps lives in the reference's `$MQTT_*` streams.
"""
