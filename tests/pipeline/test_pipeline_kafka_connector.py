"""Spark's built-in Kafka connector against Moldau: batch reads, read_committed streams, the Kafka sink, the job.

The connector is not part of pyspark: these tests need its jars in the
directory ``MOLDAU_SPARK_KAFKA_JARS`` names (spark-sql-kafka-0-10_2.13 and
spark-token-provider-kafka-0-10_2.13 of the installed Spark version,
kafka-clients 3.x, commons-pool2; the README says where they come from) and
skip without it. One Spark session, in this process, serves them all.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from helpers.kafka import create_topic, make_messages, produce_all
from helpers.pipeline import expected_totals, files_under, output_totals, read_topic, topic_values, wait_for_output
from pipeline.events import flush_event, plan
from pipeline.generate import generate
from pipeline.job import start
from pipeline.spark import KAFKA_JARS_ENV, session

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get(KAFKA_JARS_ENV),
                       reason=f"Spark's Kafka connector jars are not here (set {KAFKA_JARS_ENV} to their directory)"),
]


@pytest.fixture(scope="module")
def spark():
    s = session(kafka_connector=True)
    yield s
    s.stop()


def kafka_options(bootstrap: str, topic: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}


def test_batch_read_returns_every_record_of_multi_record_batches(spark, broker):
    topic = "connector-batch"
    create_topic(broker.bootstrap, topic, 3)
    msgs = make_messages(3000, 3, edge_cases=False)
    produce_all(broker.bootstrap, topic, msgs, linger_ms=50, compression_type="lz4")  # large, compressed batches

    options = {**kafka_options(broker.bootstrap, topic), "endingOffsets": "latest"}
    df = spark.read.format("kafka").options(**options).load()
    rows = df.select("partition", "offset", "key", "value").collect()
    assert len(rows) == len(msgs)
    assert sorted((r.partition, r.offset) for r in rows) == sorted((p, o) for p in range(3) for o in range(1000))
    assert Counter((bytes(r.key), bytes(r.value)) for r in rows) == Counter((m.key, m.value) for m in msgs)


def test_read_committed_stream_skips_aborted_transactions(spark, broker):
    topic = "connector-txn"
    create_topic(broker.bootstrap, topic, 2)
    txns = plan(3, 0, 14, abort_every=3)  # transactions 2, 5, 8 and 11 aborted
    committed = [e for t in txns if t.commit for e in t.events]
    generate({"bootstrap.servers": broker.bootstrap}, topic, txns, transactional_id="connector-txn-gen")

    query = (
        spark.readStream.format("kafka").options(**kafka_options(broker.bootstrap, topic))
        .option("kafka.isolation.level", "read_committed").load()
        .writeStream.format("memory").queryName("committed_events").trigger(availableNow=True).start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "the availableNow query did not finish in 120s"
    seen = Counter(bytes(r.value) for r in spark.sql("select value from committed_events").collect())
    assert seen == Counter(e.to_json() for e in committed)


def test_kafka_sink_output_reads_back(spark, broker):
    topic = "connector-sink"
    create_topic(broker.bootstrap, topic, 2)
    rows = [(f"key-{i % 7}", f"value-{i}") for i in range(500)]
    spark.createDataFrame(rows, "key string, value string").write.format("kafka") \
        .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save()
    assert topic_values(broker.bootstrap, topic) == Counter(v.encode() for _, v in rows)


def test_job_on_the_kafka_source_writes_each_window_once(spark, broker, tmp_path):
    source, sink = "connector-job-events", "connector-job-totals"
    create_topic(broker.bootstrap, source, 3)
    create_topic(broker.bootstrap, sink, 2)
    txns = plan(5, 0, 25)
    generate({"bootstrap.servers": broker.bootstrap}, source, txns, transactional_id="connector-job-gen",
             flush=flush_event(24))
    expected = expected_totals([e for t in txns if t.commit for e in t.events])

    query = start(spark, source="kafka", bootstrap=broker.bootstrap, input_topic=source, output_topic=sink,
                  checkpoint=str(tmp_path / "checkpoint"), trigger="1 second")

    def running() -> None:
        assert query.isActive, f"the query stopped: {query.exception()}"

    try:
        wait_for_output(broker.bootstrap, sink, sum(expected.values()), running,
                        lambda: files_under(tmp_path / "checkpoint"))
    finally:
        query.stop()
    assert output_totals(read_topic(broker.bootstrap, sink)) == expected
