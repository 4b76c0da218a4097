"""Accounts: users bound to an account, one subject space and one JetStream per account,
and the system account the operator's tools talk to.

`settings` and `config_section` are imported by the option parsers and stay free of
server code; `registry` is what the running server keeps.
"""
