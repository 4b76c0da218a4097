"""A real S3-compatible server for the lake's tests and benchmarks: SeaweedFS's `weed server -s3`.

`make` builds `weed` into the venv (`scripts/install-weed`). One process runs a
master, a volume server, a filer and the S3 gateway on loopback ports in a
temporary folder, with one identity (its keys) allowed everything. Each of its
gRPC ports is its HTTP port + 10000, so the HTTP ports are picked below 55536
with both free. Readiness is the S3 gateway taking a signed write, polled with
a deadline; a server that fails to start reports its own log.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from log.compactor.location import Lake, S3Options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WEED = Path(sys.executable).parent / "weed"
START_TIMEOUT = 60.0  # seconds: the master, volume, filer and gateway come up one after another
GRPC_OFFSET = 10000
ACCESS_KEY = "jetlake-test"
SECRET_KEY = "jetlake-test-secret"  # a throwaway for a loopback server


def spark_shape() -> Lake:
    """The lake a test Spark session is built for: S3A's jars and settings, the shape every
    test bucket shares; each bucket's endpoint and keys are set when it is bound (`bind`), as
    the one session outlives any server started after it."""
    return Lake.at(
        "s3://jetlake-tests",
        S3Options(endpoint="http://127.0.0.1:9", region="us-east-1", path_style=True),
    )


class SeaweedError(AssertionError):
    """SeaweedFS failed to start or stop; carries its log."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def http_ports(count: int) -> list[int]:
    """`count` free ports below 55536 whose gRPC twin (+10000) is free too."""
    out: list[int] = []
    while len(out) < count:
        port = random.randrange(20000, 55536 - 1)
        if port not in out and _free(port) and _free(port + GRPC_OFFSET):
            out.append(port)
    return out


class SeaweedS3:
    """One `weed server` with its S3 gateway; restartable on the same ports and data."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.master, self.volume, self.filer, self.s3 = http_ports(4)
        self.config = folder / "s3.json"
        identity = {
            "name": "jetlake",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))
        self.log_path = folder / "weed.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def options(self, *, secret_key: str = SECRET_KEY) -> S3Options:
        return S3Options(
            endpoint=self.endpoint,
            region="us-east-1",
            access_key=ACCESS_KEY,
            secret_key=secret_key,
            path_style=True,
            allow_http=True,
        )

    def lake_config(self, uri: str, timing: str, *, secret_key: str = SECRET_KEY) -> str:
        """A server's `lake { }` block for `uri` on this server, keys in it, with `timing`
        (its seal and compact intervals)."""
        return (
            f'lake {{ dir: "{uri}", {timing},\n'
            f'  s3 {{ endpoint: "{self.endpoint}", access_key: "{ACCESS_KEY}",\n'
            f'    secret_key: "{secret_key}", path_style: true, region: "us-east-1" }} }}\n'
        )

    def lake(self, bucket: str, prefix: str = "lake") -> Lake:
        return Lake.at(f"s3://{bucket}/{prefix}", self.options())

    def admin(self) -> pafs.S3FileSystem:
        """A client that may create and delete buckets (the lake's own may not)."""
        return pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region="us-east-1",
            endpoint_override=f"127.0.0.1:{self.s3}",
            scheme="http",
            force_virtual_addressing=False,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def bucket(self, name: str | None = None) -> str:
        """A new bucket (a fresh name unless given), as a user would make it."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        self.admin().create_dir(name)
        return name

    def bind(self, spark: SparkSession, bucket: str) -> None:
        """Point S3A at this server for `bucket` (its per-bucket settings), keys included: the
        session's JVM started before this server and read no keys from its environment."""
        conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        for key, value in {
            "endpoint": self.endpoint,
            "access.key": ACCESS_KEY,
            "secret.key": SECRET_KEY,
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }.items():
            conf.set(f"fs.s3a.bucket.{bucket}.{key}", value)

    def start(self) -> SeaweedS3:
        argv = [
            str(WEED),
            "server",
            f"-dir={self.data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.master}",
            "-master.volumeSizeLimitMB=64",
            f"-volume.port={self.volume}",
            "-volume.max=32",
            "-filer",
            f"-filer.port={self.filer}",
            "-s3",
            f"-s3.port={self.s3}",
            f"-s3.config={self.config}",
        ]
        log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.folder
            )
        except OSError as exc:
            raise SeaweedError(f"cannot run {WEED} (make builds it): {exc}") from exc
        finally:
            log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until the gateway takes a signed write (its filer and volume are up by then)."""
        end = time.monotonic() + START_TIMEOUT
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise SeaweedError(f"weed exited with {self._proc.returncode}:\n{self.log()}")
            try:
                fs = self.admin()
                fs.create_dir(probe)
                with fs.open_output_stream(f"{probe}/ready") as out:
                    out.write(b"ok")
                fs.delete_dir(probe)
                return
            except OSError:  # refused, or not ready yet (no volume to write to)
                pass
            if time.monotonic() > end:
                raise SeaweedError(f"S3 not ready in {START_TIMEOUT}s:\n{self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(3)  # throwaway data: no need to wait for a graceful exit
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        """The store hangs (every call times out) until `resume`."""
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]
