"""SQL over NATS: the service behind `$JL.SQL.>` (`service`), the Python client
(`client`), how a client calls off its query (`cancel`), the result chunks' encodings
(`encoding`) and the DuckDB engine the door can answer on (`duck_engine`)."""
