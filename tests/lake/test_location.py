"""The lake's location: a folder or `s3://bucket/prefix`, each engine told it in its own words,
and no secret in anything printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.server.options import load_config
from log.compactor.location import Lake, S3Options

OPTIONS = S3Options(
    endpoint="http://127.0.0.1:9000",
    region="eu-west-1",
    access_key="AKIDEXAMPLE",
    secret_key="wJalrXUtnFEMIsecret",
)


def test_a_folder_is_a_plain_path(tmp_path: Path) -> None:
    lake = Lake.at(tmp_path / "lake")
    table = lake.path("S", "20261121T105417.123400000Z")
    assert not lake.remote and lake.bucket is None
    assert str(table) == table.spark == f"{tmp_path}/lake/S/20261121T105417.123400000Z"
    assert table.delta_options == {} and lake.spark_conf() == {}
    assert lake.locate("elsewhere").uri == f"{tmp_path}/lake/elsewhere"


def test_a_bucket_gives_each_engine_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    lake = Lake.at("s3a://lakes/prod/", OPTIONS)
    table = lake.path("S") / "20261121T105417.123400000Z"
    assert lake.root == "s3://lakes/prod" and lake.bucket == "lakes"
    assert table.uri == "s3://lakes/prod/S/20261121T105417.123400000Z"
    assert table.spark == "s3a://lakes/prod/S/20261121T105417.123400000Z"
    assert table.name == "20261121T105417.123400000Z" and table.parent == lake.path("S")
    assert table.delta_options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert table.delta_options["AWS_ALLOW_HTTP"] == "true"  # the endpoint says http
    assert table.delta_options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"  # custom endpoint
    conf = lake.spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.delta.logStore.s3a.impl"].endswith("ConditionalS3LogStore")
    assert "wJalrXUtnFEMIsecret" not in repr(lake) + repr(conf)  # keys reach S3A by env
    assert lake.child_env()["AWS_SECRET_ACCESS_KEY"] == "wJalrXUtnFEMIsecret"
    assert lake.locate("s3://other/t").uri == "s3://other/t"


def test_the_environment_fills_what_the_block_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.test")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "FROMENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    lake = Lake.at("s3://b/p", S3Options(region="ap-south-1"))
    assert lake.s3 is not None
    assert (lake.s3.endpoint, lake.s3.region) == ("https://s3.example.test", "ap-south-1")
    assert lake.s3.access_key == "FROMENV" and not lake.s3.uses_http


def test_the_config_block_keeps_its_secret_out_of_sight(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    conf.write_text(
        'lake { dir: "s3://b/p", s3 { endpoint: "http://127.0.0.1:1", access_key: "AK",\n'
        '  secret_key: "topsecret", path_style: true, allow_http: true } }\n'
    )
    lake = load_config(str(conf)).lake
    assert lake.dir == "s3://b/p" and lake.s3 is not None
    assert lake.s3.secret_key == "topsecret" and lake.s3.path_style
    assert "topsecret" not in repr(lake)


def _aws_files(home: Path) -> None:
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = defaultsecret\n"
        "[lake]\naws_access_key_id = LAKEKEY\naws_secret_access_key = lakesecret\n"
        "aws_session_token = laketoken\n"
    )
    (home / ".aws" / "config").write_text(
        "[default]\nregion = eu-north-1\n[profile lake]\nregion = ap-east-1\n"
        "[profile half]\naws_access_key_id = ONLYKEY\n"
    )


def test_a_profile_gives_its_keys_to_every_sdk(tmp_path: Path) -> None:
    """delta-rs reads no profile itself: the keys AWS_PROFILE names reach it, Arrow and S3A
    alike, as the AWS CLI would pick them (the key variables first)."""
    _aws_files(tmp_path)
    home = {"HOME": str(tmp_path)}
    lake_profile = S3Options.from_env({**home, "AWS_PROFILE": "lake"})
    assert (lake_profile.access_key, lake_profile.region) == ("LAKEKEY", "ap-east-1")
    assert lake_profile.session_token == "laketoken"
    assert "lakesecret" not in repr(lake_profile) + repr(Lake("s3://b", lake_profile))
    lake = Lake("s3://b/p", lake_profile)
    assert lake.storage_options()["AWS_SESSION_TOKEN"] == "laketoken"
    assert lake.child_env()["AWS_SECRET_ACCESS_KEY"] == "lakesecret"
    default = S3Options.from_env(home)
    assert (default.access_key, default.region) == ("DEFAULTKEY", "eu-north-1")
    keyed = {
        **home,
        "AWS_PROFILE": "lake",
        "AWS_ACCESS_KEY_ID": "ENV",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    from_env = S3Options.from_env(keyed)
    assert (from_env.access_key, from_env.session_token, from_env.region) == (
        "ENV",
        None,
        "ap-east-1",
    )
    half = S3Options.from_env({**home, "AWS_PROFILE": "half"})  # half a pair: the SDKs decide
    assert half.access_key is None and half.secret_key is None
    moved = {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / ".aws" / "credentials")}
    assert S3Options.from_env({"HOME": "/nonexistent", **moved}).access_key == "DEFAULTKEY"
    assert S3Options.from_env({"HOME": "/nonexistent"}).access_key is None
    # Keys given in the block come without the profile's token, which is not theirs.
    given = S3Options(access_key="AK", secret_key="SK").over(lake_profile)
    assert (given.access_key, given.session_token) == ("AK", None)
