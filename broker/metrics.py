"""Prometheus metrics on `metrics.port`: Kafka's well-known metrics, named as Kafka's JMX exporter names them.

The request path only bumps counters in plain dicts (a few increments per request). Everything else
(log sizes, consumer lag, transactions, partition states) is read from the broker when Prometheus
scrapes. Scrapes are answered on the event loop, so they read the broker's state without locks, and
the text is what prometheus-client renders from these collections.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import socket
import struct
import time
from collections import Counter

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, SummaryMetricFamily

from broker.errors import ErrorCode
from broker.share import metrics as share_metrics
from broker.transaction.metadata import TransactionState
from protocol.codec import Encoded
from storage import clock

log = logging.getLogger("moldau.metrics")

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOOP_LAG_INTERVAL = 0.5  # seconds between event-loop lag samples
# a transaction coordinator state with a transaction under way
_ACTIVE = frozenset({TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
                     TransactionState.PREPARE_EPOCH_FENCE})
# record batch v2: batchLength at byte 8, attributes at 21 (bit 5: control batch), recordsCount at 57
_BATCH_FIELDS = struct.Struct(">8xi9xh34xi")
_RECORDS_COUNT, _HEADER = 57, 61
_CONTROL = 0x20


class Histogram:
    """Bucket counts, sum and count of observed seconds: three list updates per observation."""

    __slots__ = ("buckets", "sum", "count")

    def __init__(self):
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        running, out = 0, []
        for bound, n in zip((*map(str, BUCKETS), "+Inf"), self.buckets, strict=False):
            running += n
            out.append((bound, running))
        return out


def _batch_records(records) -> int:
    """Records in the complete, non-control batches of a fetched byte range (a trimmed last batch is not one)."""
    pos, count, end = 0, 0, len(records)
    unpack = _BATCH_FIELDS.unpack_from
    while pos + _HEADER <= end:
        length, attributes, records_count = unpack(records, pos)
        pos += 12 + length
        if pos > end:
            break
        if not attributes & _CONTROL:
            count += records_count
    return count


class BrokerMetrics:
    def __init__(self, broker, connections: set):
        self.broker = broker
        self.connections = connections
        self.latency: dict[str, Histogram] = {}
        self.errors: Counter = Counter()  # (api, error name) -> responses (per partition for Produce/Fetch)
        self.topic_in: dict[str, list[int]] = {}  # topic -> [messages, bytes]
        self.topic_out: dict[str, list[int]] = {}
        self.loop_lag = Histogram()
        self.incremental_fetches = 0  # Fetch requests of an incremental session (KIP-227)
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self.registry.register(broker.supervisor)  # moldau_background_task_restarts_total{task}
        ProcessCollector(registry=self.registry)

    # ---- the request path -------------------------------------------------------------

    def request(self, api: str, started: float, request: dict, response: dict | None) -> None:
        hist = self.latency.get(api)
        if hist is None:
            hist = self.latency[api] = Histogram()
        hist.observe(time.perf_counter() - started)
        if api == "Produce":
            self._produced(request, response)
        elif api == "Fetch" and response is not None:
            self.incremental_fetches += request["session_epoch"] > 0
            self._fetched(response)

    def _produced(self, request: dict, response: dict | None) -> None:
        answers = response["responses"] if response else [None] * len(request["topic_data"])  # acks=0: no answer
        for topic_data, answer in zip(request["topic_data"], answers, strict=False):
            parts = answer["partition_responses"] if answer else [None] * len(topic_data["partition_data"])
            for part, result in zip(topic_data["partition_data"], parts, strict=False):
                code = result["error_code"] if result else 0
                if code:
                    self.errors[("Produce", _error_name(code))] += 1
                    continue
                records = part["records"]
                counts = self.topic_in.get(topic_data["name"])
                if counts is None:
                    counts = self.topic_in[topic_data["name"]] = [0, 0]
                counts[0] += int.from_bytes(records[_RECORDS_COUNT:_HEADER], "big")
                counts[1] += len(records)

    def _fetched(self, response: dict) -> None:
        if response["error_code"]:
            self.errors[("Fetch", _error_name(response["error_code"]))] += 1
        for topic in response["responses"]:
            name = topic["topic"] or self._topic_name(topic["topic_id"])  # v13+ names topics by id
            for part in topic["partitions"]:
                if part.__class__ is Encoded:  # a partition with nothing to return (protocol/fetch_answers.py)
                    continue
                if part["error_code"]:
                    self.errors[("Fetch", _error_name(part["error_code"]))] += 1
                elif part["records"]:
                    counts = self.topic_out.get(name)
                    if counts is None:
                        counts = self.topic_out[name] = [0, 0]
                    counts[0] += _batch_records(part["records"])
                    counts[1] += len(part["records"])

    def _topic_name(self, topic_id) -> str:
        topic = self.broker.logs.topic_by_id(topic_id)
        return topic.name if topic else str(topic_id)

    # ---- scrape ----------------------------------------------------------------------

    def collect(self):
        yield from self._requests()
        yield from self._topics()
        yield from self._partitions()
        yield from self._transactions()
        yield from self._groups()
        yield from self._cluster_view()
        yield from share_metrics.collect(self.broker)
        connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                        "Open client connections", labels=["listener"])
        by_listener = Counter(conn.listener.name for conn in self.connections)
        for listener, n in sorted(by_listener.items()):
            connections.add_metric([listener], n)
        yield connections
        lag = HistogramMetricFamily("moldau_event_loop_lag_seconds",
                                    f"How late the event loop ran a callback due after {LOOP_LAG_INTERVAL} s")
        lag.add_metric([], self.loop_lag.cumulative(), self.loop_lag.sum)
        yield lag

    def _requests(self):
        total = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests handled", labels=["request"])
        for api, hist in sorted(self.latency.items()):
            total.add_metric([api], hist.count)
        yield total
        latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltime_seconds",
                                        "Time from a request's arrival to its response", labels=["request"])
        for api, hist in sorted(self.latency.items()):
            latency.add_metric([api], hist.cumulative(), hist.sum)
        yield latency
        # Kafka's RequestMetrics TotalTimeMs as the JMX exporter shows it: a count and a sum in milliseconds
        total_ms = SummaryMetricFamily("kafka_network_requestmetrics_totaltimems",
                                       "Time from a request's arrival to its response, in ms", labels=["request"])
        for api, hist in sorted(self.latency.items()):
            total_ms.add_metric([api], hist.count, hist.sum * 1000)
        yield total_ms
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                     "Produce and Fetch partition errors by error code", labels=["request", "error"])
        for (api, error), n in sorted(self.errors.items()):
            errors.add_metric([api, error], n)
        yield errors
        yield CounterMetricFamily("moldau_fetch_incremental_requests", "Fetch requests of an incremental session",
                                  value=self.incremental_fetches)
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                "Incremental fetch sessions cached", value=len(self.broker.fetch_sessions))

    def _topics(self):
        for direction, table in (("in", self.topic_in), ("out", self.topic_out)):
            messages = CounterMetricFamily(f"kafka_server_brokertopicmetrics_messages{direction}",
                                           f"Messages {'appended' if direction == 'in' else 'fetched'}",
                                           labels=["topic"])
            size = CounterMetricFamily(f"kafka_server_brokertopicmetrics_bytes{direction}",
                                       f"Record batch bytes {'appended' if direction == 'in' else 'fetched'}",
                                       labels=["topic"])
            for topic, (n, nbytes) in sorted(table.items()):
                messages.add_metric([topic], n)
                size.add_metric([topic], nbytes)
            yield messages
            yield size

    def _partitions(self):
        """Partition states as Metadata reports them, so a replicated broker's states show up unchanged.
        Under-replicated and under-min-ISR count the partitions this broker leads, as in Kafka; offline
        partitions are counted by the active controller only (0 elsewhere, as Kafka's metric is)."""
        broker = self.broker
        me = broker.node_id
        controller = broker.store.cache.controller_id == me
        leaders = under = under_min_isr = offline = 0
        for topic in broker.logs.topics.values():
            for partition in broker.partition_metadata(topic):
                isr = len(partition["isr_nodes"])
                offline += controller and partition["leader_id"] < 0
                if partition["leader_id"] != me:
                    continue
                leaders += 1
                under += isr < len(partition["replica_nodes"])
                log_ = broker.logs.log(topic.name, partition["partition_index"])
                under_min_isr += log_ is not None and isr < log_.config.min_insync_replicas
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, 0 on every other broker", value=int(controller))
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions on this broker",
                                value=len(broker.logs.logs))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount", "Partitions this broker leads",
                                value=leaders)
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here with fewer in-sync replicas than replicas", value=under)
        yield GaugeMetricFamily("kafka_server_replicamanager_underminisrpartitioncount",
                                "Partitions led here with fewer in-sync replicas than min.insync.replicas",
                                value=under_min_isr)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a leader (counted by the active controller)", value=offline)
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions led here",
                                  value=broker.replicas.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions led here", value=broker.replicas.isr_expands)
        fetchers = broker.replicas.fetchers
        max_lag = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag", "Records the most lagging "
                                    "follower partition here is behind its leader", labels=["clientId"])
        max_lag.add_metric(["Replica"], fetchers.max_lag() if fetchers is not None else 0)
        yield max_lag
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes in a partition's segments", labels=["topic", "partition"])
        for (topic, partition), log_ in sorted(broker.logs.logs.items()):
            size.add_metric([topic, str(partition)], log_.size_bytes)
        yield size

    def _transactions(self):
        active = sum(txn.state in _ACTIVE for txn in self.broker.transactions.transactions.values())
        yield GaugeMetricFamily("kafka_coordinator_transaction_active_count",
                                "Transactions the coordinator has under way", value=active)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitionswithlatetransactionscount",
                                "Partitions whose last stable offset has been stuck at an open transaction "
                                "for longer than transaction.max.timeout.ms (KIP-664)",
                                value=self.broker.transactions.lso_watch.hanging(clock.wall_ms()))

    def _cluster_view(self):
        """A clustered broker's view of etcd: the revision applied, resyncs, differences the audit found."""
        store = self.broker.store
        if not hasattr(store, "divergences"):
            return
        yield GaugeMetricFamily("moldau_etcd_revision_applied", "The etcd revision this broker's view is at",
                                value=store.revision)
        yield CounterMetricFamily("moldau_etcd_view_resyncs", "Whole reads of the view from etcd (start, watch breaks)",
                                  value=store.resyncs)
        yield CounterMetricFamily("moldau_etcd_view_divergences",
                                  "Differences between the view and etcd found by the periodic audit",
                                  value=store.divergences)

    def _groups(self):
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the group's committed offset",
                                labels=["consumergroup", "topic", "partition"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset",
                                    labels=["consumergroup", "topic", "partition"])
        for group_id, group in sorted(self.broker.groups.groups.items()):
            for (topic, partition), committed in sorted(group.offsets.items()):
                log_ = self.broker.logs.log(topic, partition)
                if log_ is None:
                    continue
                labels = [group_id, topic, str(partition)]
                current.add_metric(labels, committed.offset)
                lag.add_metric(labels, max(log_.high_watermark - committed.offset, 0))
        yield lag
        yield current

    # ---- serving ---------------------------------------------------------------------

    async def serve(self, sock: socket.socket) -> asyncio.AbstractServer:
        server = await asyncio.start_server(self._scrape, sock=sock)
        host, port = sock.getsockname()[:2]
        log.info("metrics on http://%s:%d/metrics", host, port)
        return server

    async def _scrape(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)).strip():
                pass  # headers
            parts = request_line.split()
            if len(parts) >= 2 and parts[0] == b"GET" and parts[1].split(b"?")[0] in (b"/", b"/metrics"):
                status, kind, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(self.registry)
            else:
                status, kind, body = b"404 Not Found", b"text/plain", b"metrics are at /metrics\n"
            writer.write(b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (status, kind, len(body), body))
            await writer.drain()
        except (asyncio.TimeoutError, OSError, ValueError):
            pass  # a client that hung up or never finished its request
        finally:
            writer.close()

    async def sample_loop_lag(self) -> None:
        while True:
            due = clock.monotonic() + LOOP_LAG_INTERVAL
            await clock.sleep(LOOP_LAG_INTERVAL)
            self.loop_lag.observe(max(clock.monotonic() - due, 0.0))


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
