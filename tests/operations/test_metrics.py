"""The Prometheus endpoint (metrics.port), scraped over HTTP while stock clients make traffic."""

import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from helpers import txn_wire
from helpers.kafka import COMMON, create_topic, make_messages, produce_all
from helpers.wire import WireClient
from prometheus_client.parser import text_string_to_metric_families
from protocol.records import build_batch

from conftest import free_port

TOPIC = "metered"
GROUP = "metered-group"


def scrape(port: int) -> dict[tuple, float]:
    """{(sample name, (label, value), ...): value} of one real HTTP scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, *sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(port: int, key: tuple, want, timeout: float = 20.0) -> dict:
    """Scrape until ``key`` has the value ``want`` (or, for a callable, a value it accepts)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if want(samples.get(key)) if callable(want) else samples.get(key) == want:
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} is {samples.get(key)}, expected {want}")
        time.sleep(0.2)


def lag_key(partition: int) -> tuple:
    return ("kafka_consumergroup_lag", ("consumergroup", GROUP), ("partition", str(partition)), ("topic", TOPIC))


def test_metrics_are_off_by_default(broker):
    assert "metrics on http" not in broker.log_since_start()


@pytest.mark.timeout(120)
def test_metrics_move_with_traffic(start_broker):
    port = free_port()
    b = start_broker({"metrics.port": port})
    idle = scrape(port)
    assert idle[("kafka_server_replicamanager_partitioncount",)] >= 100  # the internal topics
    assert idle[("kafka_server_replicamanager_underreplicatedpartitions",)] == 0
    assert idle[("kafka_controller_kafkacontroller_offlinepartitionscount",)] == 0
    assert ("kafka_server_brokertopicmetrics_messagesin_total", ("topic", TOPIC)) not in idle
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/elsewhere", timeout=10)

    create_topic(b.bootstrap, TOPIC, partitions=2)
    produce_all(b.bootstrap, TOPIC, make_messages(500, 2))
    s = scrape(port)
    assert s[("kafka_server_brokertopicmetrics_messagesin_total", ("topic", TOPIC))] == 500
    bytes_in = s[("kafka_server_brokertopicmetrics_bytesin_total", ("topic", TOPIC))]
    # batches are stored as they came: the logs hold exactly the bytes that came in
    assert bytes_in == sum(s[("kafka_log_log_size", ("partition", str(p)), ("topic", TOPIC))] for p in (0, 1))
    produces = s[("kafka_network_requestmetrics_requests_total", ("request", "Produce"))]
    assert produces >= 2
    assert s[("kafka_network_requestmetrics_totaltime_seconds_count", ("request", "Produce"))] == produces
    assert s[("kafka_network_requestmetrics_totaltime_seconds_bucket", ("le", "+Inf"), ("request", "Produce"))] == produces
    assert s[("kafka_server_replicamanager_partitioncount",)] == idle[("kafka_server_replicamanager_partitioncount",)] + 2

    # a group reads everything and commits: its lag is 0; messages and bytes out follow
    c = Consumer({**COMMON, "bootstrap.servers": b.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 500 and time.monotonic() < deadline:
        seen += sum(1 for m in c.consume(100, 1.0) if not m.error())
    assert seen == 500
    c.commit(asynchronous=False)
    s = wait_for(port, lag_key(0), 0)
    assert s[lag_key(1)] == 0
    assert s[("kafka_server_brokertopicmetrics_messagesout_total", ("topic", TOPIC))] >= 500
    assert s[("kafka_server_brokertopicmetrics_bytesout_total", ("topic", TOPIC))] >= bytes_in
    assert s[("kafka_server_socket_server_metrics_connection_count", ("listener", "PLAINTEXT"))] >= 1
    c.close()

    # 30 more records on partition 0: the group is 30 behind there
    produce_all(b.bootstrap, TOPIC, [m for m in make_messages(60, 2, seed=2) if m.partition == 0])
    wait_for(port, lag_key(0), 30)

    # a fetch past the end is an error by code
    reader = Consumer({**COMMON, "bootstrap.servers": b.bootstrap, "group.id": "metered-reader",
                       "auto.offset.reset": "error", "enable.auto.commit": False})
    reader.assign([TopicPartition(TOPIC, 1, 10_000)])
    reader.consume(1, 5.0)
    reader.close()
    wait_for(port, ("kafka_network_requestmetrics_errors_total", ("error", "OFFSET_OUT_OF_RANGE"), ("request", "Fetch")),
             lambda n: n is not None and n >= 1)

    # a transaction under way is active until it commits
    p = Producer({**COMMON, "bootstrap.servers": b.bootstrap, "transactional.id": "metered-txn"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TOPIC, b"in a transaction", partition=1)
    p.flush(30)
    wait_for(port, ("kafka_coordinator_transaction_active_count",), 1)
    p.commit_transaction(30)
    wait_for(port, ("kafka_coordinator_transaction_active_count",), 0)
    assert scrape(port)[("kafka_server_replicamanager_partitionswithlatetransactionscount",)] == 0

    assert scrape(port)[("moldau_event_loop_lag_seconds_count",)] > 0


@pytest.mark.timeout(120)
def test_hanging_transactions_are_counted(start_broker):
    """A transaction no coordinator knows (written by hand while the broker was down) hangs its partition."""
    port = free_port()
    b = start_broker({"metrics.port": port, "transaction.max.timeout.ms": 3000,
                      "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    with WireClient(b.port) as c:
        txn_wire.create_topic(c, "wedged")
        assert txn_wire.produce(c, "wedged", build_batch([(None, b"before")])) == txn_wire.NONE
    b.kill()
    with b.segment_files("wedged", 0)[-1].open("ab") as f:
        f.write(build_batch([(None, b"hanging")], base_offset=1, producer_id=987_654, producer_epoch=3,
                            base_sequence=0, transactional=True))
    b.start()
    late = ("kafka_server_replicamanager_partitionswithlatetransactionscount",)
    assert scrape(port)[late] == 0  # not yet older than transaction.max.timeout.ms
    wait_for(port, late, 1, timeout=30)


@pytest.mark.timeout(60)
def test_standalone_broker_is_its_own_controller_and_leads_everything(start_broker):
    """A standalone broker's replica manager and controller metrics: it leads every partition in an ISR of
    one, so with min.insync.replicas=2 every partition is under min ISR (acks=all writes are refused)."""
    port = free_port()
    b = start_broker({"metrics.port": port, "min.insync.replicas": 2})
    create_topic(b.bootstrap, TOPIC, partitions=2)
    s = scrape(port)
    partitions = s[("kafka_server_replicamanager_partitioncount",)]
    assert s[("kafka_controller_kafkacontroller_activecontrollercount",)] == 1
    assert s[("kafka_server_replicamanager_leadercount",)] == partitions
    assert s[("kafka_server_replicamanager_underminisrpartitioncount",)] == partitions  # the internal ones too
    assert s[("kafka_server_replicamanager_underreplicatedpartitions",)] == 0
    assert s[("kafka_controller_kafkacontroller_offlinepartitionscount",)] == 0
    assert s[("kafka_server_replicamanager_isrshrinks_total",)] == s[("kafka_server_replicamanager_isrexpands_total",)] == 0
    assert s[("kafka_server_replicafetchermanager_maxlag", ("clientId", "Replica"))] == 0
    assert s[("kafka_network_requestmetrics_totaltimems_count", ("request", "CreateTopics"))] == 1
    assert 0 < s[("kafka_network_requestmetrics_totaltimems_sum", ("request", "CreateTopics"))] == pytest.approx(
        1000 * s[("kafka_network_requestmetrics_totaltime_seconds_sum", ("request", "CreateTopics"))])
