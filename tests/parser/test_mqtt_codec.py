"""The MQTT 3.1.1 codec and the topic ↔ subject mapping: pure, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser import mqtt
from ingest.parser.mqtt import (
    ConnAck,
    Connect,
    ConnectRefused,
    Decoder,
    Disconnect,
    PingReq,
    PingResp,
    ProtocolError,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ingest.parser.mqtt_topics import (
    TopicError,
    filter_subjects,
    is_valid_filter,
    skips_reserved,
    to_subject,
    to_topic,
)

CONNECT = Connect("dev1", True, 30)


def server_parse(data: bytes, **kw: int) -> list[mqtt.Packet]:
    return Decoder(**kw).receive(data)


def raw_connect(
    level: int = 4, flags: int = 2, client_id: bytes = b"c", tail: bytes = b""
) -> bytes:
    body = b"\x00\x04MQTT" + bytes((level, flags)) + b"\x00\x3c"
    body += len(client_id).to_bytes(2, "big") + client_id + tail
    return b"\x10" + mqtt.encode_varint(len(body)) + body


# -- variable-length integers -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (2_097_152, b"\x80\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),
    ],
)
def test_varint_spec_examples(value: int, wire: bytes) -> None:
    """The boundary values of the MQTT 3.1.1 spec's table 2.4."""
    assert mqtt.encode_varint(value) == wire
    assert mqtt.decode_varint(wire, 0) == (value, len(wire))
    assert mqtt.decode_varint(wire[:-1], 0) is None


def test_varint_of_five_bytes_is_malformed() -> None:
    with pytest.raises(ProtocolError, match="malformed variable int"):
        mqtt.decode_varint(b"\xff\xff\xff\xff\x01", 0)
    with pytest.raises(ValueError):
        mqtt.encode_varint(268_435_456)


@given(st.integers(0, mqtt.MAX_REMAINING_LENGTH))
def test_varint_round_trip(value: int) -> None:
    wire = mqtt.encode_varint(value)
    assert 1 <= len(wire) <= 4
    assert mqtt.decode_varint(b"x" + wire + b"tail", 1) == (value, 1 + len(wire))


# -- packets ---------------------------------------------------------------------------

_ids = st.integers(1, 65535)
_text = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20
)
_topic = _text.filter(lambda t: t and "+" not in t and "#" not in t).map(str.encode)
_client_id = st.text("abcdefgh-_0123456789", max_size=12)

_server_bound = st.one_of(
    st.builds(
        Connect,
        _client_id.filter(bool),
        st.booleans(),
        st.integers(0, 65535),
        st.none()
        | st.builds(Will, _topic, st.binary(max_size=20), st.integers(0, 2), st.booleans()),
        st.none() | _text.filter(bool),
        st.none(),
    ),
    st.builds(
        Publish,
        _topic,
        st.binary(max_size=300),
        st.just(0),
        st.booleans(),
        st.booleans(),
        st.just(0),
    ),
    st.builds(
        lambda t, p, q, r, d, i: Publish(t, p, q, r, d, i),
        _topic,
        st.binary(max_size=300),
        st.integers(1, 2),
        st.booleans(),
        st.booleans(),
        _ids,
    ),
    st.builds(PubAck, _ids),
    st.builds(PubRec, _ids),
    st.builds(PubRel, _ids),
    st.builds(PubComp, _ids),
    st.builds(
        Subscribe,
        _ids,
        st.lists(st.tuples(_text.filter(bool).map(str.encode), st.integers(0, 2)), min_size=1).map(
            tuple
        ),
    ),
    st.builds(
        Unsubscribe, _ids, st.lists(_text.filter(bool).map(str.encode), min_size=1).map(tuple)
    ),
    st.just(PingReq()),
    st.just(Disconnect()),
)

_client_bound = st.one_of(
    st.builds(ConnAck, st.booleans(), st.integers(0, 5)),
    st.builds(SubAck, _ids, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1).map(tuple)),
    st.builds(UnsubAck, _ids),
    st.builds(PubAck, _ids),
    st.builds(Publish, _topic, st.binary(max_size=50)),
    st.just(PingResp()),
)


@settings(max_examples=300)
@given(st.lists(_server_bound, max_size=6), st.data())
def test_server_bound_round_trip_split_anywhere(
    packets: list[mqtt.Packet], data: st.DataObject
) -> None:
    """Whatever encodes decodes to the same packets, however the bytes are cut."""
    stream = [CONNECT, *(p for p in packets if not isinstance(p, Connect))]
    wire = b"".join(mqtt.encode(p) for p in stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=5)))
    decoder = Decoder()
    got: list[mqtt.Packet] = []
    prev = 0
    for cut in [*cuts, len(wire)]:
        got += decoder.receive(wire[prev:cut])
        prev = cut
    assert got == stream


@given(st.lists(_client_bound, min_size=1, max_size=6))
def test_client_bound_round_trip(packets: list[mqtt.Packet]) -> None:
    wire = b"".join(mqtt.encode(p) for p in packets)
    assert Decoder(server=False).receive(wire) == packets


@settings(max_examples=500)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_protocol_error(data: bytes) -> None:
    """Fuzz: arbitrary input gives packets or ProtocolError, never another exception."""
    for stream in (data, mqtt.encode(CONNECT) + data):
        try:
            for packet in Decoder().receive(stream):
                assert isinstance(packet, mqtt.Packet)
        except ProtocolError:
            pass


@settings(max_examples=300)
@given(st.lists(_server_bound, min_size=1, max_size=4), st.integers(0, 10_000), st.integers(0, 255))
def test_corrupted_streams_parse_or_raise(
    packets: list[mqtt.Packet], where: int, value: int
) -> None:
    """A flipped byte in a valid stream never escapes as anything but ProtocolError."""
    wire = bytearray(mqtt.encode(CONNECT) + b"".join(mqtt.encode(p) for p in packets))
    wire[where % len(wire)] = value
    try:
        got = Decoder().receive(bytes(wire))
    except ProtocolError:
        return
    assert all(isinstance(p, mqtt.Packet) for p in got)


def test_connect_fields() -> None:
    will = Will(b"dead/dev1", b"bye", 1, True)
    packet = Connect("dev1", False, 60, will, "alice", b"s3cret")
    assert server_parse(mqtt.encode(packet)) == [packet]


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (raw_connect(level=3), mqtt.UNACCEPTABLE_PROTOCOL),
        (raw_connect(level=5), mqtt.UNACCEPTABLE_PROTOCOL),
        (raw_connect(flags=0, client_id=b""), mqtt.IDENTIFIER_REJECTED),
        (raw_connect(client_id=b"a.b"), mqtt.IDENTIFIER_REJECTED),
        (raw_connect(flags=0x82, tail=b"\x00\x00"), mqtt.BAD_USER_OR_PASSWORD),
    ],
)
def test_connects_answered_with_a_refusal_code(wire: bytes, code: int) -> None:
    (packet,) = server_parse(wire)
    assert isinstance(packet, ConnectRefused)
    assert packet.code == code
    assert mqtt.encode(packet) == bytes((0x20, 2, 0, code))


def test_empty_client_id_with_clean_session_is_accepted() -> None:
    assert server_parse(raw_connect(flags=2, client_id=b"")) == [Connect("", True, 60)]


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (b"\x30\x05\x00\x01ax", "first packet should be a CONNECT"),
        (b"\xc0\x00", "first packet should be a CONNECT"),
        (mqtt.encode(CONNECT) * 2, "second CONNECT"),
        (raw_connect(flags=3), "reserved bit"),
        (raw_connect(flags=0x42), "password flag"),
        (raw_connect(flags=0x0A), "Will QoS"),
        (raw_connect(flags=0x1E), "QoS can be 0, 1 or 2"),
        (raw_connect().replace(b"MQTT", b"MQTX"), "protocol name"),
        (mqtt.encode(CONNECT) + b"\x30\x05\x00\x03a/+", "wildcards"),
        (mqtt.encode(CONNECT) + b"\x30\x02\x00\x00", "topic cannot be empty"),
        (mqtt.encode(CONNECT) + b"\x36\x04\x00\x01ax", "QoS=3"),
        (mqtt.encode(CONNECT) + b"\x32\x05\x00\x01a\x00\x00", "packet identifier cannot be 0"),
        (mqtt.encode(CONNECT) + b"\x40\x03\x00\x01\x00", "remaining length"),
        (mqtt.encode(CONNECT) + b"\x62\x01\x00", "remaining length"),
        (mqtt.encode(CONNECT) + b"\x60\x02\x00\x01", "fixed header flags"),
        (mqtt.encode(CONNECT) + b"\x80\x06\x00\x01\x00\x01a\x00", "fixed header flags"),
        (mqtt.encode(CONNECT) + b"\x82\x02\x00\x01", "at least 1 topic filter"),
        (mqtt.encode(CONNECT) + b"\x82\x06\x00\x01\x00\x01a\x03", "QoS value"),
        (mqtt.encode(CONNECT) + b"\x82\x05\x00\x01\x00\x00\x00", "cannot be empty"),
        (mqtt.encode(CONNECT) + b"\x20\x02\x00\x00", "unknown packet type"),
        (mqtt.encode(CONNECT) + b"\x00\x00", "unknown packet type"),
        (mqtt.encode(CONNECT) + b"\xf0\x00", "unknown packet type"),
        (mqtt.encode(CONNECT) + b"\x30\xff\xff\xff\xff\x01", "malformed variable int"),
        (mqtt.encode(CONNECT) + b"\x30\x03\x00\x01\xff", "invalid utf8"),
        (mqtt.encode(CONNECT) + b"\x30\x03\x00\x01\x00", "null character"),
    ],
)
def test_malformed_streams_raise(wire: bytes, reason: str) -> None:
    decoder = Decoder()
    with pytest.raises(ProtocolError, match=reason):
        decoder.receive(wire)
    with pytest.raises(ProtocolError):
        decoder.receive(mqtt.encode(PingReq()))  # a failed stream stays failed


def test_packet_over_max_before_connect_raises() -> None:
    big = mqtt.encode(Connect("c", True, 0, Will(b"t", b"x" * 200, 0, False)))
    with pytest.raises(ProtocolError, match="maximum payload"):
        Decoder(max_packet=100).receive(big[:10])
    assert len(Decoder(max_packet=len(big)).receive(big)) == 1


def test_publish_encoding_is_byte_exact() -> None:
    assert mqtt.encode_publish(b"a/b", b"hi", qos=1, retain=True, dup=True, packet_id=7) == (
        b"\x3b\x09\x00\x03a/b\x00\x07hi"
    )


# -- topics and subjects -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "subject"),
    [
        (b"foo", b"foo"),
        (b"foo/bar", b"foo.bar"),
        (b"/foo", b"/.foo"),
        (b"foo/", b"foo./"),
        (b"foo//bar", b"foo./.bar"),
        (b"/", b"/./"),
        (b"//", b"/././"),
        (b"foo.bar", b"foo//bar"),
        (b"a/b.c/d", b"a.b//c.d"),
        (b"$SYS/x", b"$SYS.x"),
    ],
)
def test_topic_subject_examples(topic: bytes, subject: bytes) -> None:
    assert to_subject(topic) == subject
    assert to_topic(subject) == topic


@pytest.mark.parametrize(
    ("topic_filter", "subjects"),
    [
        (b"foo/+", (b"foo.*",)),
        (b"foo/#", (b"foo.>", b"foo")),
        (b"#", (b">",)),
        (b"+/+", (b"*.*",)),
        (b"/#", (b"/.>", b"/")),
    ],
)
def test_filters(topic_filter: bytes, subjects: tuple[bytes, ...]) -> None:
    assert filter_subjects(topic_filter) == subjects


def test_wildcards_and_whitespace_are_refused_where_they_have_no_subject() -> None:
    for bad in (b"a/+", b"a/#"):
        with pytest.raises(TopicError):
            to_subject(bad)
    for bad in (b"a b", b"a\tb", b"a\x7fb"):
        with pytest.raises(TopicError):
            to_subject(bad, wildcards=True)
    assert not is_valid_filter(b"a/#/b")
    assert not is_valid_filter(b"a/b#")
    assert not is_valid_filter(b"a+/b")
    assert is_valid_filter(b"+/a/#")


def test_leading_wildcards_skip_reserved_topics() -> None:
    assert skips_reserved(b">") and skips_reserved(b"*") and skips_reserved(b"*.x")
    assert not skips_reserved(b"$SYS.>") and not skips_reserved(b"a.>")


_topic_chars = st.sampled_from(list("ab/.$-é"))


@given(st.text(_topic_chars, min_size=1, max_size=16))
def test_topic_round_trip(topic: str) -> None:
    raw = topic.encode()
    assert to_topic(to_subject(raw)) == raw


@given(st.text(_topic_chars, min_size=1, max_size=16))
def test_subjects_keep_levels_apart(topic: str) -> None:
    """One NATS token per MQTT level: what MQTT wildcards match, NATS wildcards match too."""
    subject = to_subject(topic.encode())
    assert len(subject.split(b".")) == len(topic.split("/"))
    assert all(subject.split(b"."))  # never an empty NATS token
