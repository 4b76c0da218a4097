"""`mqtt_messages`: what MQTT clients published at QoS 1 and 2, by MQTT topic.

An MQTT server keeps those messages in the `$MQTT_msgs` stream under
`$MQTT.msgs.<subject>`, where the subject is the topic mapped the way the
reference maps it (`/` → `.`, a `.` in a level → `//`, an empty level kept as a
`/` beside its separator). People who publish `plant/3/temp` query by that
topic, not by `plant.3.temp`, so the view carries the topic back: the inverse
mapping as a column expression Spark runs itself, with no Python per row.

`sql` may not import `ingest/parser` (where the forward mapping lives), so the
inverse is written here once, in Spark's terms; the lake tests check it
against the parser's own `to_topic` over the mapping's edge cases.

The view is derived from the `$MQTT_msgs` stream view (lake up to L plus live
tail, see `sql.views`), so it is built after `stream_views` in the same pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import GLOBAL, LakeError, streams
from log.compactor.location import Lake

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

MSGS_STREAM = "$MQTT_msgs"
MSGS_PREFIX = "$MQTT.msgs."
VIEW = "mqtt_messages"
PUBLISHED_QOS = "Nmqtt-Pub"  # the header an MQTT publish carries: the publisher's QoS
# Placeholders for the two-character escapes while single `/` and `.` are rewritten:
# control characters, which neither a NATS subject nor an MQTT topic can hold here.
_DOT, _SLASH = "\u0001", "\u0002"


def topic_of(subject: Column) -> Column:
    """The MQTT topic of a mapped subject: `//` → `.`, `/.` → `/`, a lone `/` dropped, `.` → `/`.

    The pairs are rewritten first and left to right, as the reference's reverse
    scan reads them, so `a./.b` is `a//b` and `a//b.c` is `a.b/c`.
    """
    from pyspark.sql import functions as F

    pairs = F.regexp_replace(F.regexp_replace(subject, "//", _DOT), "/\\.", _SLASH)
    return F.translate(F.regexp_replace(pairs, "/", ""), f".{_DOT}{_SLASH}", "/./")


def messages_frame(stream_view: DataFrame) -> DataFrame:
    """seq, ts, topic, qos (the publisher's), payload and date of every stored MQTT message."""
    from pyspark.sql import functions as F

    subject = F.expr(f"substring(subject, {len(MSGS_PREFIX) + 1})")
    qos = F.try_element_at(F.col("headers").getItem(PUBLISHED_QOS), F.lit(1))
    return stream_view.where(F.col("subject").startswith(MSGS_PREFIX)).select(
        "seq",
        "ts",
        topic_of(subject).alias("topic"),
        qos.cast("int").alias("qos"),
        F.col("data").alias("payload"),
        "date",
    )


def mqtt_views(
    spark: SparkSession, store_dir: Path, _lake: Lake, account: str
) -> dict[str, DataFrame]:
    """`mqtt_messages` when the store has an MQTT messages stream (file storage, as always);
    MQTT is the global account's alone."""
    if account != GLOBAL:
        return {}
    try:
        found = any(s.name == MSGS_STREAM and s.storage == "file" for s in streams(store_dir))
    except LakeError:
        return {}  # stream_views logged it in this pass
    from sql.views import derived

    return {VIEW: derived(spark, MSGS_STREAM, VIEW, messages_frame)} if found else {}
