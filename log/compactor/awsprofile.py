"""An AWS profile's keys and region, read from the shared files the AWS CLI writes.

Spark's S3A and Arrow find a profile themselves (AWS_PROFILE, `~/.aws/credentials`
and `~/.aws/config`), but delta-rs's object store does not: it reads the key
variables and then asks the instance metadata service, so a lake whose keys are
only in a profile would be written by Spark and unreadable to every delta-rs
read and append. Reading the profile here, once, gives every SDK the same keys.

Only static keys are read (`aws_access_key_id`, `aws_secret_access_key`,
`aws_session_token`); a profile that assumes a role or signs in through SSO is
left to the SDKs' own chains, as is a machine with no profile at all.
"""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROFILE_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE")
CREDENTIALS_ENV = "AWS_SHARED_CREDENTIALS_FILE"
CONFIG_ENV = "AWS_CONFIG_FILE"


@dataclass(frozen=True, slots=True)
class Profile:
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None


def _section(path: Path, name: str) -> Mapping[str, str]:
    """The section `name` of an INI file ({} when the file or the section is missing, or the
    file cannot be parsed: the SDKs' own chains still get their turn)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error):
        return {}
    return parser[name] if parser.has_section(name) else {}


def read_profile(env: Mapping[str, str]) -> Profile:
    """The profile AWS_PROFILE names (else `default`), as the AWS CLI reads it: keys from the
    credentials file before the config file, the region from the config file."""
    name = next((env[n] for n in PROFILE_ENV if env.get(n)), "default")
    home = Path(env.get("HOME") or Path.home())
    credentials = Path(env.get(CREDENTIALS_ENV) or home / ".aws" / "credentials")
    config = Path(env.get(CONFIG_ENV) or home / ".aws" / "config")
    from_credentials = _section(credentials, name)
    from_config = _section(config, name if name == "default" else f"profile {name}")

    def first(key: str) -> str | None:
        return from_credentials.get(key) or from_config.get(key) or None

    access_key = first("aws_access_key_id")
    secret_key = first("aws_secret_access_key")
    if not (access_key and secret_key):  # half a key pair is no key: the SDKs decide
        access_key = secret_key = None
    return Profile(
        access_key=access_key,
        secret_key=secret_key,
        session_token=first("aws_session_token") if access_key else None,
        region=from_config.get("region") or None,
    )
