"""Share group metrics for the Prometheus endpoint: per share partition led here, its backlog (records at or
past the start offset not yet acknowledged or archived, up to the high watermark), the records acquired and
held now, and the records acquired since the broker started; acknowledgements by type."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LABELS = ["sharegroup", "topic", "partition"]


def collect(broker):
    manager = broker.share.partitions
    backlog = GaugeMetricFamily("moldau_share_group_backlog",
                                "Records of a share partition not yet acknowledged or archived", labels=LABELS)
    in_flight = GaugeMetricFamily("moldau_share_group_records_acquired",
                                  "Records of a share partition acquired (locked) by a consumer now", labels=LABELS)
    acquired = CounterMetricFamily("moldau_share_group_acquisitions",
                                   "Records handed out by a share partition since this broker loaded it",
                                   labels=LABELS)
    for key, sp in sorted(manager.partitions.items(), key=lambda e: (e[0].group_id, str(e[0].topic_id),
                                                                    e[0].partition)):
        topic = broker.logs.topic_by_id(key.topic_id)
        log_ = broker.logs.log(topic.name, key.partition) if topic is not None else None
        if log_ is None:
            continue
        labels = [key.group_id, topic.name, str(key.partition)]
        backlog.add_metric(labels, sp.backlog(log_.high_watermark))
        in_flight.add_metric(labels, sp.in_flight())
        acquired.add_metric(labels, sp.acquired_total)
    acks = CounterMetricFamily("moldau_share_group_acknowledgements", "Records acknowledged, by type",
                               labels=["type"])
    for kind, n in sorted(manager.acknowledged.items()):
        acks.add_metric([kind], n)
    yield from (backlog, in_flight, acquired, acks)
