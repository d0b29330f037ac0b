"""Group configs checked as Kafka's GroupConfig checks them (in process: the values, not the wire)."""

from __future__ import annotations

import pytest

from broker.config.broker_config import BrokerConfig
from broker.config.group_configs import DELETE, SET, GroupConfigs
from storage.errors import InvalidConfig


def _configs(tmp_path, **settings) -> GroupConfigs:
    return GroupConfigs(BrokerConfig({"log.dirs": str(tmp_path), **{k.replace("_", "."): str(v)
                                                                   for k, v in settings.items()}}))


def _ops(**configs) -> list[dict]:
    return [{"name": n.replace("_", "."), "value": v, "config_operation": SET if v is not None else DELETE}
            for n, v in configs.items()]


def test_session_and_heartbeat_configs_lie_within_the_brokers_bounds(tmp_path):
    groups = _configs(tmp_path, group_consumer_min_heartbeat_interval_ms=1000)
    assert groups.changed({}, _ops(consumer_heartbeat_interval_ms="1000")) == {"consumer.heartbeat.interval.ms": "1000"}
    for refused, says in [({"consumer_heartbeat_interval_ms": "999"}, "group.consumer.min.heartbeat.interval.ms"),
                          ({"consumer_heartbeat_interval_ms": "15001"}, "group.consumer.max.heartbeat.interval.ms"),
                          ({"consumer_session_timeout_ms": "44999"}, "group.consumer.min.session.timeout.ms"),
                          ({"consumer_session_timeout_ms": "60001"}, "group.consumer.max.session.timeout.ms"),
                          ({"share_heartbeat_interval_ms": "4999"}, "group.share.min.heartbeat.interval.ms"),
                          ({"share_session_timeout_ms": "60001"}, "group.share.max.session.timeout.ms"),
                          ({"share_record_lock_duration_ms": "999"}, "[1000, 3600000]"),
                          ({"share_isolation_level": "dirty"}, "read_committed"),
                          ({"group_max_size": "3"}, "Unknown group config name")]:
        with pytest.raises(InvalidConfig, match=says.replace("[", r"\[")):
            groups.changed({}, _ops(**refused))
    # the session must exceed the interval, the group's or the broker's
    groups = _configs(tmp_path, group_consumer_max_heartbeat_interval_ms=50000)
    with pytest.raises(InvalidConfig, match="greater than consumer.heartbeat.interval.ms"):
        groups.changed({}, _ops(consumer_heartbeat_interval_ms="45000"))
    assert groups.changed({"consumer.heartbeat.interval.ms": "45000"},
                          _ops(consumer_heartbeat_interval_ms=None)) == {}


def test_a_group_reads_its_own_value_over_the_brokers_and_ignores_what_it_cannot_read(tmp_path):
    groups = _configs(tmp_path, group_consumer_heartbeat_interval_ms=6000)
    groups.set("g", {"consumer.heartbeat.interval.ms": "7000", "consumer.unknown": "1",
                     "share.record.lock.duration.ms": "many"})
    assert groups.groups == {"g": {"consumer.heartbeat.interval.ms": "7000"}}
    assert groups.value("g", "consumer.heartbeat.interval.ms") == 7000
    assert groups.value("h", "consumer.heartbeat.interval.ms") == 6000
    groups.save()
    again = _configs(tmp_path)
    again.load()
    assert again.groups == groups.groups
    groups.set("g", {})
    assert groups.groups == {}
