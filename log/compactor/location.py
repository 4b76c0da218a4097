"""Where the lake is: a folder or an S3 bucket, behind one small path type.

Every reader and writer of the lake (the compactor, the views, the jobs, the
server's lag and reclaim) does the same few things at a table's location: join
names, ask whether a Delta log is there, read and replace a small pin file,
list tables, stage Parquet. pyarrow's file systems do each of those for a local
disk and for S3 alike, so a `LakePath` is a URI plus the `Lake` it lives in, and
no code is written twice per backend. Each engine is handed the location in its
own words: `deltalake` a URI and storage options, Spark an `s3a://` path and
S3A settings (`spark_conf`), Arrow readers a file system.

Credentials: the `s3 { }` block's keys, else the standard AWS chain (the
`AWS_*` environment variables, then profiles and instance roles, as each SDK
finds them). Secrets are never part of a repr, a log line or a status page;
the server hands them to its compactor in the child's environment, where
every SDK (S3A's, delta-rs's, Arrow's) reads them, never on a command line.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from consensus.wal_recovery import replace_durably
from log.compactor.awsprofile import read_profile

if TYPE_CHECKING:
    import pyarrow.fs as pafs

S3_SCHEMES = ("s3://", "s3a://")
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_ENV = ("AWS_REGION", "AWS_DEFAULT_REGION")
KEY_ENV = "AWS_ACCESS_KEY_ID"
SECRET_ENV = "AWS_SECRET_ACCESS_KEY"
TOKEN_ENV = "AWS_SESSION_TOKEN"
ALLOW_HTTP_ENV = "AWS_ALLOW_HTTP"  # delta-rs's name
VIRTUAL_HOSTED_ENV = "AWS_VIRTUAL_HOSTED_STYLE_REQUEST"  # delta-rs's name: false = path style
DEFAULT_REGION = "us-east-1"
LOG_STORE = "io.jetlake.delta.ConditionalS3LogStore"  # log/compactor/logstore, built at set-up
CONNECT_TIMEOUT = 3.0  # seconds: a store that is gone fails a call quickly, never hangs a pass
REQUEST_TIMEOUT = 30.0


def _arrow_fs() -> ModuleType:
    """pyarrow's file systems, imported on first use: the server's settings know this module
    (`S3Options`), and importing pyarrow there would double `jetlake serve`'s start-up time
    for every server, lake or not."""
    import pyarrow.fs

    return pyarrow.fs


class LakeStoreError(OSError):
    """The lake's store refused or failed a call; the message names the bucket or file."""


def _truthy(value: str | None) -> bool | None:
    return None if value is None else value.strip().lower() in ("1", "true", "yes", "on")


def _first_env(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


@dataclass(frozen=True, slots=True)
class S3Options:
    """The `s3 { }` block: the names a Spark S3A, delta-rs or AWS CLI user knows. None: the
    standard AWS chain decides (environment, profile, instance role)."""

    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)  # temporary keys' third part
    path_style: bool | None = None  # None: path style with a custom endpoint, else virtual hosts
    allow_http: bool | None = None  # None: when the endpoint says http://

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Options:
        """The AWS environment variables, then the profile's keys and region (AWS_PROFILE or
        `default`), in the AWS CLI's order."""
        env = os.environ if env is None else env
        hosted = _truthy(env.get(VIRTUAL_HOSTED_ENV))
        profile = read_profile(env)
        keyed = bool(env.get(KEY_ENV) and env.get(SECRET_ENV))
        return cls(
            endpoint=_first_env(env, ENDPOINT_ENV),
            region=_first_env(env, REGION_ENV) or profile.region,
            access_key=env.get(KEY_ENV) if keyed else profile.access_key,
            secret_key=env.get(SECRET_ENV) if keyed else profile.secret_key,
            session_token=(env.get(TOKEN_ENV) or None) if keyed else profile.session_token,
            path_style=None if hosted is None else not hosted,
            allow_http=_truthy(env.get(ALLOW_HTTP_ENV)),
        )

    def over(self, base: S3Options) -> S3Options:
        """These options, with `base`'s where these say nothing (keys given here come without
        `base`'s session token, which belongs to its own keys)."""
        if self.access_key is not None:
            base = replace(base, session_token=None)
        given = {f: getattr(self, f) for f in self.__dataclass_fields__}
        return replace(base, **{k: v for k, v in given.items() if v is not None})

    @property
    def uses_path_style(self) -> bool:
        return self.path_style if self.path_style is not None else self.endpoint is not None

    @property
    def uses_http(self) -> bool:
        if self.allow_http is not None:
            return self.allow_http
        return (self.endpoint or "").startswith("http://")

    def env(self) -> dict[str, str]:
        """The options as the AWS environment variables every SDK here reads (for a child)."""
        out = {
            ENDPOINT_ENV[1]: self.endpoint,
            REGION_ENV[0]: self.region,
            KEY_ENV: self.access_key,
            SECRET_ENV: self.secret_key,
            TOKEN_ENV: self.session_token,
            ALLOW_HTTP_ENV: "true" if self.uses_http else None,
            VIRTUAL_HOSTED_ENV: None if self.path_style is None else str(not self.path_style),
        }
        return {k: v.lower() if v in ("True", "False") else v for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class Lake:
    """The lake's root: a local folder, or `s3://bucket/prefix` with its options."""

    root: str
    s3: S3Options | None = None
    _fs: dict[str, pafs.FileSystem] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    @classmethod
    def at(cls, where: str | os.PathLike[str], s3: S3Options | None = None) -> Lake:
        """A lake from a path or URI; an S3 one takes `s3` over the environment's options."""
        text = os.fspath(where)
        for scheme in S3_SCHEMES:
            if text.startswith(scheme):
                root = "s3://" + text[len(scheme) :].strip("/")
                return cls(root, (s3 or S3Options()).over(S3Options.from_env()))
        return cls(str(Path(text).absolute()))

    @property
    def remote(self) -> bool:
        return self.s3 is not None

    @property
    def bucket(self) -> str | None:
        return self.root[len("s3://") :].split("/", 1)[0] if self.remote else None

    def path(self, *parts: str) -> LakePath:
        return LakePath(self, self.root).joinpath(*parts)

    def locate(self, where: str | os.PathLike[str]) -> LakePath:
        """A path given by a user (`jetlake.lake.table`): a URI of this lake's kind, or a folder
        relative to the lake's root."""
        text = os.fspath(where)
        if self.remote and text.startswith(S3_SCHEMES):
            return LakePath(self, Lake.at(text).root)
        if not self.remote:
            return LakePath(self, str(Path(self.root, text).absolute()))
        return self.path(text)

    @property
    def fs(self) -> pafs.FileSystem:
        """Arrow's file system for this lake (made once; a local folder's or S3's)."""
        if "fs" not in self._fs:
            self._fs["fs"] = self._make_fs()
        return self._fs["fs"]

    def _make_fs(self) -> pafs.FileSystem:
        if self.s3 is None:
            return _arrow_fs().LocalFileSystem()
        o = self.s3
        endpoint = o.endpoint
        scheme = "http" if o.uses_http else "https"
        if endpoint and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        return _arrow_fs().S3FileSystem(
            access_key=o.access_key,
            secret_key=o.secret_key,
            session_token=o.session_token,
            region=o.region or DEFAULT_REGION,
            endpoint_override=endpoint,
            scheme=scheme,
            force_virtual_addressing=not o.uses_path_style,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            allow_bucket_creation=False,
            allow_bucket_deletion=False,
        )

    def storage_options(self) -> dict[str, str]:
        """`deltalake`'s options for this lake ({} for a folder)."""
        if self.s3 is None:
            return {}
        o = self.s3
        out = {
            "AWS_ENDPOINT_URL": o.endpoint,
            "AWS_REGION": o.region or DEFAULT_REGION,
            "AWS_ACCESS_KEY_ID": o.access_key,
            "AWS_SECRET_ACCESS_KEY": o.secret_key,
            "AWS_SESSION_TOKEN": o.session_token,
            "AWS_ALLOW_HTTP": "true" if o.uses_http else None,
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if o.uses_path_style else "true",
            # As S3A's below: a store that is gone, refusing or stalled fails a call within
            # REQUEST_TIMEOUT (delta-rs's defaults retry ten times for up to three minutes).
            "connect_timeout": f"{CONNECT_TIMEOUT:g}s",
            "timeout": f"{REQUEST_TIMEOUT:g}s",
            "max_retries": "3",
            "retry_timeout": f"{REQUEST_TIMEOUT:g}s",
        }
        return {k: v for k, v in out.items() if v}

    def spark_conf(self) -> dict[str, str]:
        """S3A's settings for this lake ({} for a folder). Keys are not among them: S3A's
        credential chain reads them from the environment, so no Spark conf carries a secret."""
        if self.s3 is None:
            return {}
        o = self.s3
        hadoop = {
            "fs.s3a.path.style.access": str(o.uses_path_style).lower(),
            "fs.s3a.connection.ssl.enabled": str(not o.uses_http).lower(),
            "fs.s3a.endpoint.region": o.region or DEFAULT_REGION,
            "fs.s3a.aws.credentials.provider": (
                "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
            ),
            # A store that is gone, refusing (500) or throttling (503 SlowDown) fails a pass
            # in seconds, and one that stalls within REQUEST_TIMEOUT; the follower's next pass
            # retries after its own backoff. (S3A's defaults retry a throttled call 20 times,
            # doubling, and wait 200 s on a silent socket: a pass held for minutes.)
            "fs.s3a.attempts.maximum": "2",
            "fs.s3a.retry.limit": "2",
            "fs.s3a.retry.throttle.limit": "2",
            "fs.s3a.retry.throttle.interval": "500ms",
            "fs.s3a.connection.establish.timeout": str(int(CONNECT_TIMEOUT * 1000)),
            "fs.s3a.connection.request.timeout": str(int(REQUEST_TIMEOUT * 1000)),
            "fs.s3a.connection.timeout": str(int(REQUEST_TIMEOUT * 1000)),
            "fs.s3a.create.conditional.enabled": "true",
        }
        if o.endpoint:
            hadoop["fs.s3a.endpoint"] = o.endpoint
        # Commits as put-if-absent through S3A's conditional create: exact with any number of
        # writers (Delta's default S3 log store is safe with one; `ConditionalS3LogStore`).
        store = {f"spark.delta.logStore.{s}.impl": LOG_STORE for s in ("s3", "s3a")}
        return {**{f"spark.hadoop.{k}": v for k, v in hadoop.items()}, **store}

    def child_env(self) -> dict[str, str]:
        """The environment a child process (the compactor) needs to reach this lake."""
        return self.s3.env() if self.s3 is not None else {}

    def check(self) -> None:
        """Raise LakeStoreError naming the bucket unless its top level can be listed: a bucket
        that does not exist and refused credentials are both said here (a listing of the
        lake's own prefix would not do: Arrow reads a missing bucket as an empty folder)."""
        if self.bucket is None:
            return
        try:
            self.fs.get_file_info(_arrow_fs().FileSelector(self.bucket))
        except OSError as exc:
            raise LakeStoreError(f"lake bucket {self.bucket}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    """The store's answer in one line (Arrow's names the bucket and the S3 error code)."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


LakeAt = Lake | str | os.PathLike[str]  # a Lake, or a folder or URI (`as_lake`)


def as_lake(where: LakeAt) -> Lake:
    """A lake from either a Lake or what `Lake.at` takes (a folder, or a URI with the
    environment's options)."""
    return where if isinstance(where, Lake) else Lake.at(where)


@dataclass(frozen=True, slots=True)
class LakePath:
    """A location in the lake: a URI (a plain path for a folder) and the lake it is in."""

    lake: Lake = field(compare=False)
    uri: str

    def __str__(self) -> str:
        return self.uri

    def __truediv__(self, name: str) -> LakePath:
        return self.joinpath(name)

    def joinpath(self, *parts: str) -> LakePath:
        uri = self.uri
        for part in parts:
            uri = posixpath.join(uri, part)
        return LakePath(self.lake, uri)

    @property
    def name(self) -> str:
        return posixpath.basename(self.uri)

    @property
    def parent(self) -> LakePath:
        return LakePath(self.lake, posixpath.dirname(self.uri))

    def with_name(self, name: str) -> LakePath:
        return self.parent / name

    @property
    def spark(self) -> str:
        """The path as Spark's Hadoop file systems name it (`s3a://` for S3)."""
        return "s3a://" + self.uri[len("s3://") :] if self.lake.remote else self.uri

    @property
    def delta_options(self) -> dict[str, str]:
        return self.lake.storage_options()

    @property
    def fs_path(self) -> str:
        """Arrow's name for it: `bucket/key` on S3, the path itself on a disk."""
        return self.uri.removeprefix("s3://")

    def info(self) -> pafs.FileInfo | None:
        """The file's info from the store; None if the store failed (gone, refused)."""
        try:
            return self.lake.fs.get_file_info(self.fs_path)
        except OSError:
            return None

    def is_dir(self) -> bool:
        """A folder on a disk; on S3, a key prefix with anything under it."""
        info = self.info()
        return info is not None and info.type == _arrow_fs().FileType.Directory

    def is_delta_table(self) -> bool:
        return (self / "_delta_log").is_dir()

    def read_bytes(self) -> bytes:
        try:
            with self.lake.fs.open_input_stream(self.fs_path) as f:
                return f.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            if "NoSuchKey" in str(exc) or "not found" in str(exc).lower():
                raise FileNotFoundError(self.uri) from exc
            raise LakeStoreError(f"{self.uri}: {_reason(exc)}") from exc

    def write_bytes(self, data: bytes) -> None:
        """Replace the file whole: a PUT on S3 is atomic; a disk gets a renamed temporary
        (per process: several servers' compactors may write one pin)."""
        if not self.lake.remote:
            path = Path(self.uri)
            replace_durably(path, data, tmp=path.with_name(f"{path.name}.{os.getpid()}.tmp"))
            return
        try:
            with self.lake.fs.open_output_stream(self.fs_path) as f:
                f.write(data)
        except OSError as exc:
            raise LakeStoreError(f"{self.uri}: {_reason(exc)}") from exc

    def mkdir(self) -> None:
        """A folder on a disk (S3 has none: a key needs no parent)."""
        if not self.lake.remote:
            Path(self.uri).mkdir(parents=True, exist_ok=True)

    def children(self, pattern: str = "*") -> Iterator[LakePath]:
        """Entries directly under this folder whose name matches `pattern` (fnmatch)."""
        try:
            found = self.lake.fs.get_file_info(
                _arrow_fs().FileSelector(self.fs_path, allow_not_found=True)
            )
        except OSError:
            return
        for info in sorted(found, key=lambda i: i.path):
            if fnmatch(info.base_name, pattern):
                yield self / info.base_name

    def mtime(self) -> float | None:
        info = self.info()
        return info.mtime.timestamp() if info is not None and info.mtime is not None else None

    def count_files(self, suffix: str) -> int:
        """Files under this folder, at any depth, whose name ends with `suffix`."""
        try:
            found = self.lake.fs.get_file_info(
                _arrow_fs().FileSelector(self.fs_path, recursive=True, allow_not_found=True)
            )
        except OSError as exc:
            raise LakeStoreError(f"{self.uri}: {_reason(exc)}") from exc
        return sum(
            1 for i in found if i.type == _arrow_fs().FileType.File and i.base_name.endswith(suffix)
        )

    def remove_tree(self) -> None:
        """Remove the folder and everything under it; a failure is left for a later sweep."""
        try:
            self.lake.fs.delete_dir(self.fs_path)
        except OSError:
            return
