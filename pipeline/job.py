"""The streaming job: events in, per-key totals per event-time window out, exactly once.

The source is ``kafka`` (Spark's connector) or ``moldau`` (``datasource``),
both read_committed and with the same columns, so the rest of the job does
not know which one it reads. Output goes through the ``moldau`` sink, one
JSON record per closed window (append mode: a window is written once, when
the watermark passes its end, never updated).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from .events import WATERMARK_DELAY_MS, WINDOW_MS

EVENT_SCHEMA = "key string, amount long, ts long"


def parse(records: DataFrame) -> DataFrame:
    """Kafka records to events (key, amount, event_time); a value that is no such JSON is dropped."""
    event = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
    return (
        records.select(event.alias("e"))
        .select("e.key", "e.amount", F.timestamp_millis("e.ts").alias("event_time"))
        .where(F.col("key").isNotNull() & F.col("amount").isNotNull() & F.col("event_time").isNotNull())
    )


def totals(events: DataFrame) -> DataFrame:
    """Count and sum of amounts per key and tumbling event-time window, behind a watermark."""
    return (
        events.withWatermark("event_time", f"{WATERMARK_DELAY_MS} milliseconds")
        .groupBy(F.window("event_time", f"{WINDOW_MS} milliseconds"), "key")
        .agg(F.count("*").alias("count"), F.sum("amount").alias("amount"))
    )


def to_records(totals: DataFrame) -> DataFrame:
    """One record per window and key: key, and a JSON value with the window in epoch milliseconds."""
    value = F.to_json(F.struct(
        "key",
        F.unix_millis("window.start").alias("window_start"),
        F.unix_millis("window.end").alias("window_end"),
        "count",
        "amount",
    ))
    return totals.select("key", value.alias("value"))


def start(spark: SparkSession, *, source: str, bootstrap: str, input_topic: str, output_topic: str,
          checkpoint: str, trigger: str) -> StreamingQuery:
    """Start the query; a checkpoint that exists already makes it resume where it stopped."""
    records = (
        spark.readStream.format(source)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    return (
        to_records(totals(parse(records))).writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime=trigger)
        .start()
    )
