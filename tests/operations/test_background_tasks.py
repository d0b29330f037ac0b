"""A standalone broker's background tasks fail (MOLDAU_FAULT_FAIL_TASKS_FILE) and go on: each failure is logged
once with its traceback and counted on the metrics port, and each task's work resumes -- the acceptor accepts,
retention deletes, the cleaner cleans, idle producers, timed-out transactions, expired offsets and idle
connections go, transaction markers are sent, the loop-lag sampler samples."""

import socket
import time
import urllib.request

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from helpers.groups import wait_until
from helpers.kafka import admin, consumer, flush, producer, watermarks
from helpers.supervision import ENV, FAIL_FILE, fail_tasks, failures_logged, request_failures, restarts, wait_failed

from conftest import free_port

IDLE_MS = 2000
TASKS = [
    "data-plane-kafka-socket-acceptor-PLAINTEXT",
    "kafka-log-retention",
    "kafka-log-cleaner-thread",
    "kafka-log-flusher",
    "PeriodicProducerExpirationCheck",
    "delete-expired-group-metadata",
    "transaction-abort",
    "transactionalId-expiration",
    "late-transactions-check",
    "transaction-summary",
    "connections-max-idle",
    "event-loop-lag-sampler",
]


def _lag_samples(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return next(float(line.split()[-1]) for line in text.splitlines()
                if line.startswith("moldau_event_loop_lag_seconds_count"))


def _send(p, topic: str, records) -> None:
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0)
        p.flush(30)
    flush(p)


@pytest.mark.timeout(180)
def test_every_standalone_background_task_restarts_after_a_failure_and_does_its_work(start_broker):
    port = free_port()
    b = start_broker({
        "metrics.port": port,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.num.partitions": 1,
        "log.retention.check.interval.ms": 300,
        "log.segment.delete.delay.ms": 0,
        "log.cleaner.backoff.ms": 200,
        "log.flush.interval.ms": 100,
        "producer.id.expiration.ms": 1000,
        "producer.id.expiration.check.interval.ms": 300,
        "offsets.retention.minutes": 0,
        "offsets.retention.check.interval.ms": 300,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
        "connections.max.idle.ms": IDLE_MS,
    }, autostart=False)
    b.env = ENV
    b.start()
    lag_before = _lag_samples(port)
    assert restarts(port) == {}

    log = fail_tasks(b, TASKS)
    failed, tracebacks = failures_logged(log)
    assert sorted(failed) == sorted(TASKS) and tracebacks == len(TASKS), log  # one traceback for each failure
    assert restarts(port) == {name: 1 for name in TASKS}

    # the acceptor: new connections are accepted (every client below makes its own)
    a = admin(b.bootstrap)
    topics = [NewTopic("retained", 1, 1, config={"segment.bytes": "1000", "retention.bytes": "3000"}),
              NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "2000",
                                                   "min.cleanable.dirty.ratio": "0.01"})]
    for future in a.create_topics(topics, operation_timeout=30).values():
        future.result(30)

    # retention deletes the segments past retention.bytes; the idempotent producer's state expires when idle
    p, _ = producer(b.bootstrap, linger_ms=0, enable_idempotence=True)
    _send(p, "retained", [(b"k%d" % i, b"x" * 200) for i in range(40)])

    def earliest() -> int:
        c, _ = consumer(b.bootstrap)
        try:
            return watermarks(c, "retained", 0)[0]
        finally:
            c.close()

    wait_until(lambda: earliest() > 0, 30, "retention to delete old segments")
    b.wait_for_log(r"expired the state of \d+ idle producer", timeout=30)

    # the cleaner compacts
    _send(p, "compacted", [(b"k%d" % (i % 5), b"v%d" % i) for i in range(60)])
    b.wait_for_log(r"cleaned compacted-0 below offset", timeout=60)

    # an empty group's offsets expire
    a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("idle", [TopicPartition("retained", 0, 2)])])[
        "idle"].result(10)
    wait_until(lambda: "idle" not in {g.group_id for g in a.list_consumer_groups().result(10).valid}, 30,
               "the idle group's offsets to expire")

    # a transaction open past its timeout is aborted; the marker sender fails as it starts and is restarted,
    # so the abort completes and the next producer of the id commits
    sender = "TxnMarkerSenderThread-1"
    since = request_failures(b, [sender])
    wait_until(lambda: not (b.data_dir / FAIL_FILE).exists(), 10, "the broker to take the fault")
    txn, _ = producer(b.bootstrap, transactional_id="forgotten", transaction_timeout_ms=2000,
                      socket_timeout_ms=2000, message_timeout_ms=2000)
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("retained", value=b"open", partition=0)
    txn.flush(30)
    b.wait_for_log(r"aborting .*forgotten.*: open for", timeout=30)
    with pytest.raises(KafkaException):
        txn.commit_transaction(30)
    failed, tracebacks = failures_logged(wait_failed(b, [sender], since))
    assert failed == [sender] and tracebacks == 1
    again, _ = producer(b.bootstrap, transactional_id="forgotten")
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("retained", value=b"committed", partition=0)
    again.commit_transaction(30)

    # an idle connection is closed
    with socket.create_connection(("127.0.0.1", b.port), timeout=IDLE_MS / 1000 * 10) as idle:
        assert idle.recv(1) == b""  # closed by the broker, not timed out here
    b.wait_for_log(r"idle for more than connections.max.idle.ms", timeout=10)

    # the loop-lag sampler samples again
    assert _lag_samples(port) > lag_before
    time.sleep(1)
    assert restarts(port) == {name: 1 for name in TASKS + [sender]}  # none failed again
