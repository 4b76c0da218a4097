"""`jetlake inspect` against real segment files written by `FileStore`.

The expected answers are computed from what the test wrote and deleted, never
from the reader under test, so a reader that served a deleted or torn message,
or lost a whole batch, fails here.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from log.segments import FileStore, NewMsg, SegmentConfig, list_segments
from sql.inspect import find_stream_dirs, main

SUBJECTS = ["orders.new", "orders.paid", "orders.shipped"]
REMOVED = {2, 7, 11, 24}
BATCH = 5


@dataclass
class Store:
    root: Path
    orders: Path
    dashed: Path
    written: dict[int, NewMsg] = field(default_factory=dict)

    def live(self) -> dict[int, NewMsg]:
        return {seq: m for seq, m in self.written.items() if seq not in REMOVED}


def stream_dir(root: Path, folder: str, name: str | None) -> Path:
    path = root / "jetstream" / "$G" / "streams" / folder
    path.mkdir(parents=True)
    if name is not None:
        doc = {"config": {"name": name}, "created": "2024-01-01T00:00:00Z"}
        (path / "stream.json").write_text(json.dumps(doc))
    return path


def message(i: int) -> NewMsg:
    """Every third has headers (with CRLF), every seventh non-UTF-8 data."""
    data = b"\xff\xfe%d" % i if i % 7 == 0 else b"order %d" % i
    hdr = b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else None
    return NewMsg(subject=SUBJECTS[i % 3], hdr=hdr, data=data, ts=1_700_000_000_000_000_000 + i)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    root = tmp_path / "store"
    out = Store(root, stream_dir(root, "ORDERS", "ORDERS"), stream_dir(root, "ORDERS-1", None))
    fs = FileStore(out.orders, name="ORDERS", config=SegmentConfig(max_msgs=10))
    for start in range(0, 25, BATCH):
        batch = [message(i) for i in range(start, start + BATCH)]
        first = fs.append(batch)
        out.written.update({first + k: m for k, m in enumerate(batch)})
    for seq in REMOVED:
        assert fs.remove(seq)
    fs.close()
    other = FileStore(out.dashed, name="ORDERS-1")
    other.append([message(100), message(101)])
    other.close()
    return out


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], store: Store, sql: str) -> list[dict]:
    code, out, err = run(capsys, "--store", str(store.root), "--format", "json", sql)
    assert (code, err) == (0, "")
    return json.loads(out)


def test_store_has_sealed_segments_and_deletes(store: Store) -> None:
    infos = list_segments(store.orders)
    assert [i.sealed for i in infos] == [True, True, False]
    assert sum(i.rows for i in infos) == 25  # index rows include deleted messages


def test_listing_matches_list_segments(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    code, out, _ = run(capsys, "--store", str(store.root), "--format", "json")
    assert code == 0
    want = [("ORDERS", i) for i in list_segments(store.orders)] + [
        ("ORDERS-1", i) for i in list_segments(store.dashed)
    ]
    got = json.loads(out)
    assert [r["stream"] for r in got] == [name for name, _ in want]
    for row, (_, info) in zip(got, want, strict=True):
        assert Path(store.root, row["file"]) == info.path
        assert (row["first_seq"], row["last_seq"], row["rows"]) == (
            info.first_seq,
            info.last_seq,
            info.rows,
        )
        assert (row["bytes"], row["sealed"]) == (info.bytes, info.sealed)


def test_listing_table_is_aligned(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    code, out, _ = run(capsys, "--store", str(store.root))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == [
        "stream",
        "file",
        "first_seq",
        "last_seq",
        "rows",
        "bytes",
        "sealed",
    ]
    assert len(lines) == 2 + 3 + 1
    starts = [i for i, c in enumerate(lines[1]) if c == "-" and (i == 0 or lines[1][i - 1] == " ")]
    for line in lines[2:]:  # every cell of text columns begins where its dashes begin
        assert line[starts[1] : starts[1] + 9] == "jetstream"
    assert lines[2].split()[-1] == "true" and lines[-1].split()[-1] == "false"


def test_group_by_equals_written_minus_deleted(
    capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    rows = as_json(capsys, store, "SELECT subject, count(*) AS n FROM orders GROUP BY 1")
    want = Counter(m.subject for m in store.live().values())
    assert {r["subject"]: r["n"] for r in rows} == want
    assert sum(want.values()) == 25 - len(REMOVED)


def test_quoted_stream_name(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    assert as_json(capsys, store, 'SELECT count(*) AS n FROM "ORDERS-1"') == [{"n": 2}]


def test_json_is_exact(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    rows = as_json(capsys, store, "SELECT * FROM ORDERS ORDER BY seq")
    live = store.live()
    assert [r["seq"] for r in rows] == sorted(live)
    for row in rows:
        msg = live[row["seq"]]
        assert base64.b64decode(row["data"]) == msg.data
        assert row["headers"] == (msg.hdr and {"K": [str(row["seq"] - 1)]})
        assert row["ts"] == "2023-11-14 22:13:20.000000+0000"  # the lake's µs
        assert (row["stream"], row["date"]) == ("ORDERS", "2023-11-14")


def test_csv_parses(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    sql = "SELECT seq, subject, data FROM orders ORDER BY seq"
    code, out, _ = run(capsys, "--store", str(store.root), "--format", "csv", sql)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    live = store.live()
    assert [int(r["seq"]) for r in rows] == sorted(live)
    for r in rows:
        data = live[int(r["seq"])].data
        assert r["data"] == (data.decode() if data.isascii() else "0x" + data.hex())


def test_table_limit_text_hex_and_escapes(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    sql = (
        "SELECT seq, headers, data, subject || chr(13) || chr(10) AS crlf "
        "FROM orders WHERE seq IN (1, 5, 8) ORDER BY seq"
    )
    code, out, _ = run(capsys, "--store", str(store.root), "--limit", "2", sql)
    lines = out.splitlines()
    assert code == 0
    assert lines[2].split() == ["1", '{"K":', '["0"]}', "0xfffe30", "orders.new\\r\\n"]
    assert lines[3].split() == ["5", "NULL", "order", "4", "orders.paid\\r\\n"]
    assert lines[4:] == ["(1 more rows)"]


def test_stream_flag_restricts(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    code, out, _ = run(
        capsys, "--store", str(store.root), "--stream", "ORDERS-1", "--format", "csv"
    )
    assert code == 0
    assert {r["stream"] for r in csv.DictReader(io.StringIO(out))} == {"ORDERS-1"}
    code, _, err = run(
        capsys, "--store", str(store.root), "--stream", "ORDERS-1", "SELECT 1 FROM orders"
    )
    assert code == 1
    assert "orders" in err and "query: SELECT 1 FROM orders" in err


def test_unknown_stream_fails(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    code, out, err = run(capsys, "--store", str(store.root), "--stream", "NOPE")
    assert (code, out) == (1, "")
    assert "'NOPE' not found" in err and "ORDERS, ORDERS-1" in err


def test_missing_store_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--store", str(tmp_path / "absent"))
    assert code == 1 and str(tmp_path / "absent") in err


def test_sql_error_shows_query(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    code, out, err = run(capsys, "--store", str(store.root), "SELEC nonsense")
    assert (code, out) == (1, "")
    assert "syntax error" in err.lower() and "query: SELEC nonsense" in err


def test_torn_active_tail_read_to_last_whole_batch(
    capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    active = list_segments(store.orders)[-1]
    with open(active.path, "r+b") as f:
        f.truncate(active.bytes - 3)  # the last batch (seqs 21..25) is torn
    rows = as_json(capsys, store, "SELECT seq FROM orders ORDER BY seq")
    assert [r["seq"] for r in rows] == [s for s in sorted(store.live()) if s <= 20]
    assert active.path.stat().st_size == active.bytes - 3  # read-only: no repair


def test_reads_beside_an_open_store(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    fs = FileStore(store.orders, name="ORDERS", config=SegmentConfig(max_msgs=10))
    try:
        fs.append([message(i) for i in range(25, 28)])
        fs.remove(26)
        rows = as_json(capsys, store, "SELECT count(*) AS n FROM orders")
    finally:
        fs.close()
    assert rows == [{"n": 25 - len(REMOVED) + 3 - 1}]


def test_corrupt_sealed_segment_named_and_skipped(
    capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    first = list_segments(store.orders)[0]
    raw = bytearray(first.path.read_bytes())
    raw[-10] ^= 0xFF
    first.path.write_bytes(bytes(raw))
    code, out, err = run(capsys, "--store", str(store.root), "--format", "json", "FROM orders")
    assert code == 1
    assert str(first.path) in err and "skipped" in err
    assert [r["seq"] for r in json.loads(out)] == [s for s in sorted(store.live()) if s > 10]


def test_case_collision_refused(capsys: pytest.CaptureFixture[str], store: Store) -> None:
    FileStore(stream_dir(store.root, "orders", "orders"), name="orders").close()
    code, _, err = run(capsys, "--store", str(store.root), "SELECT count(*) FROM orders")
    assert code == 1 and "ORDERS, orders" in err and "--stream" in err
    code, out, _ = run(capsys, "--store", str(store.root), "--stream", "orders", "FROM orders")
    columns = ["stream", "seq", "ts", "subject", "headers", "data", "date"]  # the lake's
    assert code == 0 and out.splitlines()[0].split() == columns


def test_stream_names(store: Store, tmp_path: Path) -> None:
    (store.orders / "stream.json").write_text(json.dumps({"config": {"name": "RENAMED"}}))
    twin = tmp_path / "store" / "other" / "ORDERS-1"
    twin.mkdir(parents=True)
    FileStore(twin, name="ORDERS-1").close()
    assert find_stream_dirs(store.root) == {
        "RENAMED": store.orders,
        "jetstream/$G/streams/ORDERS-1": store.dashed,
        "other/ORDERS-1": twin,
    }
    assert find_stream_dirs(store.dashed) == {"ORDERS-1": store.dashed}


def test_console_script(store: Store) -> None:
    jetlake = Path(sys.executable).parent / "jetlake"
    sql = "SELECT subject, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"
    done = subprocess.run(
        [jetlake, "inspect", "--store", store.root, "--format", "csv", sql],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    want = sorted(Counter(m.subject for m in store.live().values()).items())
    assert done.stdout == "subject,n\n" + "".join(f"{s},{n}\n" for s, n in want)


def test_a_named_accounts_stream_is_named_as_spark_names_it(
    capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    theirs = store.root / "jetstream" / "A" / "streams" / "ORDERS"
    theirs.mkdir(parents=True)
    doc = {"config": {"name": "ORDERS"}, "created": "2024-01-01T00:00:00Z"}
    (theirs / "stream.json").write_text(json.dumps(doc))
    fs = FileStore(theirs, name="ORDERS")
    fs.append([message(i) for i in range(4)])
    fs.close()
    assert find_stream_dirs(store.root)["A.ORDERS"] == theirs
    assert find_stream_dirs(store.root)["ORDERS"] == store.orders
    [row] = as_json(capsys, store, 'SELECT count(*) AS n FROM "A.ORDERS"')
    assert row == {"n": 4}
