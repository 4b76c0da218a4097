"""`mqtt_messages`: MQTT publishes read back in Spark SQL by their MQTT topic."""

from __future__ import annotations

import aiomqtt
from pyspark.sql import SparkSession

from ingest.parser.mqtt_topics import to_subject, to_topic
from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef
from sql.mqtt_views import topic_of
from tests.lake.conftest import LAKE_CONF, Lake
from tests.mqtt.conftest import mqtt_port, next_message

# The mapping's edge cases: dots in a level, leading, trailing and doubled `/`, `$` topics.
TOPICS = (
    "plant/3/temp",
    "a.b/c",
    "/lead",
    "trail/",
    "x//y",
    "/",
    "//",
    "a/./b",
    "..",
    "$SYS/x",
    "m/./",
    "./.",
)


def test_topic_of_inverts_the_reference_mapping(spark: SparkSession) -> None:
    """Spark's inverse gives back every topic, and agrees with the parser's `to_topic`."""
    from pyspark.sql import functions as F

    subjects = [to_subject(t.encode()).decode() for t in TOPICS]
    frame = spark.createDataFrame([(s,) for s in subjects], "subject STRING")
    got = [r.topic for r in frame.select(topic_of(F.col("subject")).alias("topic")).collect()]
    assert got == [to_topic(s.encode()).decode() for s in subjects]
    assert got == list(TOPICS)


async def test_mqtt_messages_view_has_topics_qos_and_payloads(lake: Lake) -> None:
    server = lake.start(config=LAKE_CONF + "mqtt { port: -1 }\n")
    port = mqtt_port(server)
    published = [("plant/3/temp", b"21.5", 1), ("a.b/c", b"dot", 2), ("/lead", b"lead", 1)]
    async with (
        aiomqtt.Client("127.0.0.1", port, identifier="lake-sub", timeout=5) as sub,
        aiomqtt.Client("127.0.0.1", port, identifier="lake-pub", timeout=5) as pub,
    ):
        await sub.subscribe("#", qos=2)  # interest: `$MQTT_msgs` keeps what it stores for it
        for topic, payload, qos in published:
            await pub.publish(topic, payload, qos=qos)
        await pub.publish("plant/qos0", b"not stored", qos=0)
        got = [await next_message(sub) for _ in range(len(published) + 1)]
        assert sorted(m.topic.value for m in got) == sorted(["plant/qos0", *TOPICS[:2], "/lead"])
        query = "SELECT topic, CAST(payload AS STRING) AS p, qos FROM mqtt_messages ORDER BY seq"
        rows = lake.sql(query)  # live tail: acknowledged, and still there for the lake
        assert [(r.topic, r.p.encode(), r.qos) for r in rows] == published
    await lake.sealed("$MQTT_msgs", len(published))
    lake.compact()
    ref = StreamRef.load(lake.stream_dir("$MQTT_msgs"))
    assert lake_progress(ref.table_path(lake.lake_dir), ref.app_id) == len(published)
    rows = lake.sql(query)  # now from Delta
    assert [(r.topic, r.p.encode(), r.qos) for r in rows] == published
