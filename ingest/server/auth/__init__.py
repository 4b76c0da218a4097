"""Who may connect and what a connection may do: the login and its permissions
(`authenticator`), a listener block's override of them (`listener`), and operator mode's
config keys (`config`) and account resolver (`resolver`, fetching what it lacks in
`account_fetch`). The JWT and nkey rules themselves, without I/O, are `ingest.server.jwt`."""
