"""Which flags and config keys `jetlake serve` accepts, read from the parsers themselves.

The top-level keys and the flags are dict tables already. A section's keys live in its
reader's `if lowered == …` chain, so they are collected from that function's source:
every string the lower-cased key is compared with, directly or through a module-level
tuple or dict. Reading the chains rather than keeping a second list is what lets a test
notice a key added to a parser and not to the page.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from ingest.server import config_file, flags, lake_config
from ingest.server.accounts import config_section as accounts_section
from ingest.server.accounts import config_sharing
from ingest.server.auth import config as auth_config
from ingest.server.cluster import config_section as cluster_section
from ingest.server.leafnode import config_section as leafnode_section
from ingest.server.websocket import config_section as websocket_section

# A section of the config file -> the functions whose `lowered` comparisons name its keys.
SECTION_READERS: dict[str, tuple[Callable[..., Any], ...]] = {
    "authorization": (config_file._authorization,),
    "authorization.users": (config_file._users,),
    "permissions": (config_file._permissions, config_file._subject_permission),
    "tls": (config_file._tls,),
    "jetstream": (config_file._jetstream_key,),
    "jetstream.limits": (config_file._jetstream_limit,),
    "lake": (lake_config.read_lake,),
    "lake.s3": (lake_config._lake_s3,),
    "lake.sql": (lake_config._lake_sql,),
    "cluster": (cluster_section._cluster_key, cluster_section.listener_fields),
    "cluster.authorization": (cluster_section.single_user_authorization,),
    "leafnodes": (leafnode_section._leafnodes_key, cluster_section.listener_fields),
    "leafnodes.authorization": (
        cluster_section.single_user_authorization,
        leafnode_section._authorization_more,
    ),
    "leafnodes.remotes": (leafnode_section._remote,),
    "leafnodes.compression": (leafnode_section._compression_block,),
    "resolver": (auth_config.resolver,),
    "mqtt": (config_file._mqtt,),
    "mqtt.authorization": (cluster_section.single_user_authorization,),
    "websocket": (websocket_section._websocket_key, cluster_section.listener_fields),
    "websocket.authorization": (cluster_section.single_user_authorization,),
    "accounts.NAME": (accounts_section._account,),
    "accounts.NAME.exports": (config_sharing._export,),
    "accounts.NAME.imports": (config_sharing._import,),
    "accounts.NAME.limits": (config_sharing.read_limits,),
    "accounts.NAME.jetstream": (config_sharing.read_jetstream_limits,),
}


def top_level_keys() -> set[str]:
    """Every top-level config key, aliases included."""
    return set(config_file._TOP_LEVEL)


def flag_names() -> set[str]:
    """Every flag spelling `jetlake serve` accepts (without dashes)."""
    return set(flags._FLAG_SPECS)


def section_keys(section: str) -> set[str]:
    """Every key a section's readers compare against, aliases and refused keys included."""
    found: set[str] = set()
    for reader in SECTION_READERS[section]:
        found |= _compared_strings(reader)
    return found


def _compared_strings(function: Callable[..., Any]) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    module_globals = function.__globals__
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not _is_name(node.left, "lowered"):
            continue
        for operand in node.comparators:
            found |= _strings(operand, module_globals)
    return found


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _strings(node: ast.expr, module_globals: dict[str, Any]) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    if isinstance(node, ast.Name) and isinstance(module_globals.get(node.id), tuple | dict):
        return {str(key) for key in module_globals[node.id]}
    return set()  # a parameter (e.g. `refused`): its keys are compared elsewhere too
