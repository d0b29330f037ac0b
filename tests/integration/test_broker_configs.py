"""Dynamic broker configs on a standalone broker, with confluent-kafka's AdminClient: described as Kafka
describes them (read-only flags, sources, synonyms), the run-time ones accepted for the broker or the
cluster default, enforced, and kept in the data directory across a restart."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from helpers.kafka import admin, producer
from helpers.wire import WireClient, alter_broker_configs, api_versions_roundtrip, describe_broker_configs

BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC

pytestmark = pytest.mark.timeout(120)


def _describe(a, kind, name: str) -> dict[str, ConfigEntry]:
    (future,) = a.describe_configs([ConfigResource(kind, name)]).values()
    return future.result(30)


def _set(broker, name: str, validate_only: bool = False, **configs: str | None) -> None:
    """IncrementalAlterConfigs SET (DELETE for None) on BROKER ``name``; "" (the cluster default) goes over the
    wire, as librdkafka refuses it."""
    if name == "":
        with WireClient(broker.port) as c:
            code, message = alter_broker_configs(c, "", {k.replace("_", "."): v for k, v in configs.items()},
                                                 validate_only)
        if code:
            raise KafkaException(KafkaError(code, message))
        return
    entries = [ConfigEntry(k.replace("_", "."), v or "",
                           incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
               for k, v in configs.items()]
    a = admin(broker.bootstrap)
    (future,) = a.incremental_alter_configs([ConfigResource(BROKER, name, incremental_configs=entries)],
                                            validate_only=validate_only).values()
    future.result(30)


def _produce_error(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    p, _ = producer(bootstrap, linger_ms=0, retries=0, message_timeout_ms=10000)
    errors = []
    p.produce(topic, key=b"k", value=bytes(size), on_delivery=lambda err, m: errors.append(err))
    p.flush(30)
    return errors[0]


def test_broker_configs_are_described_altered_enforced_and_kept(start_broker):
    broker = start_broker({"node.id": 1, "log.retention.hours": 48})
    a = admin(broker.bootstrap)
    entries = _describe(a, BROKER, "1")
    assert entries["log.dirs"].is_read_only and entries["listeners"].is_read_only
    threads = entries["num.io.threads"]
    assert (threads.value, threads.source, threads.is_read_only) == ("8", ConfigSource.DEFAULT_CONFIG.value, False)
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.is_read_only) == ("60000", False)
    hours = entries["log.retention.hours"]
    assert (hours.value, hours.source, hours.is_read_only) == ("48", ConfigSource.STATIC_BROKER_CONFIG.value, False)
    assert entries["ssl.key.password"].is_sensitive and entries["ssl.key.password"].value is None
    with WireClient(broker.port) as c:
        assert describe_broker_configs(c, "") == {}  # no cluster default set

    # per broker (librdkafka's admin test sets this one), and the cluster default
    _set(broker, "1", sasl_kerberos_min_time_before_relogin="58000", num_io_threads="4")
    offset = broker.log_offset()
    _set(broker, "1", log_cleaner_io_max_bytes_per_second="1048576", log_cleaner_backoff_ms="100")
    broker.wait_for_log("dynamic broker configs in force: .*'log.cleaner.backoff.ms': '100', "
                        "'log.cleaner.io.max.bytes.per.second': '1048576.0'", since=offset)
    a.create_topics([NewTopic("sized", 1, 1)])["sized"].result(30)
    assert _produce_error(broker.bootstrap, "sized", 5000) is None
    _set(broker, "", message_max_bytes="2000", validate_only=True)
    assert _produce_error(broker.bootstrap, "sized", 5000) is None
    _set(broker, "", message_max_bytes="2000")
    error = _produce_error(broker.bootstrap, "sized", 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
    topic_entry = _describe(a, TOPIC, "sized")["max.message.bytes"]
    assert (topic_entry.value, topic_entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # a LIST config: APPEND to the value in force (server.properties' delete)
    (future,) = a.incremental_alter_configs([ConfigResource(BROKER, "1", incremental_configs=[
        ConfigEntry("log.cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])]).values()
    future.result(30)
    policy = _describe(a, BROKER, "1")["log.cleanup.policy"]
    assert (policy.value, policy.source) == ("delete,compact", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    _set(broker, "1", log_cleanup_policy=None)

    refusals = {"log.dirs": "/elsewhere", "sasl_kerberos_ticket_renew_jitter": "0.1", "min_insync_replicas": "x",
                "no.such.config": "1"}
    for name, value in refusals.items():
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            _set(broker, "", **{name: value})  # static, per broker only, not an int, unknown

    broker.restart()
    a = admin(broker.bootstrap)
    entries = _describe(a, BROKER, "1")
    relogin = entries["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert entries["message.max.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    with WireClient(broker.port) as c:
        assert describe_broker_configs(c, "") == {
            "message.max.bytes": ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}
    error = _produce_error(broker.bootstrap, "sized", 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error

    _set(broker, "", message_max_bytes=None)  # DELETE: back to server.properties' value
    assert _produce_error(broker.bootstrap, "sized", 5000) is None
    assert _describe(a, BROKER, "1")["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_log_levels_change_at_run_time_through_the_broker_logger_resource(start_broker):
    """Kafka's BROKER_LOGGER resource (kafka-python's admin client; librdkafka has none): each logger with
    its level; IncrementalAlterConfigs sets one (or DELETEs it: it inherits again), at once, this broker only."""
    from kafka.admin import AlterConfigOp, ConfigResourceType, KafkaAdminClient
    from kafka.admin import ConfigResource as KafkaPythonResource

    broker = start_broker({"node.id": 1, "message.max.bytes": 1000})
    a = admin(broker.bootstrap)
    a.create_topics([NewTopic("quiet", 1, 1)])["quiet"].result(30)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    logger = ConfigResourceType.BROKER_LOGGER

    def levels() -> dict:
        (described,) = client.describe_configs([KafkaPythonResource(logger, "1")], config_filter="all").values()
        return described["1"]

    def set_level(name: str, level: str | None):
        op = (AlterConfigOp.SET, level) if level else (AlterConfigOp.DELETE, None)
        (result,) = client.alter_configs([KafkaPythonResource(logger, "1", {name: op})], raise_on_unknown=False,
                                         incremental=True).values()
        return result["1"]

    try:
        found = levels()
        assert found["root"]["value"] == "INFO" and found["moldau.produce"]["value"] == "INFO"
        assert found["moldau.produce"]["config_source"] == "DYNAMIC_BROKER_LOGGER_CONFIG"
        set_level("moldau.produce", "WARN")
        assert levels()["moldau.produce"]["value"] == "WARN"
        offset = broker.log_offset()
        _produce_error(broker.bootstrap, "quiet", 5000)  # refused: logged at INFO
        set_level("moldau.produce", None)
        assert levels()["moldau.produce"]["value"] == "INFO"
        _produce_error(broker.bootstrap, "quiet", 5000)
        assert broker.log_since(offset).count("refused batch for quiet-0") == 1
        refusals = [("moldau.produce", "LOUD", "InvalidConfigurationError"),
                    ("no.such.logger", "INFO", "InvalidConfigurationError"), ("root", None, "InvalidRequestError")]
        for name, level, error in refusals:
            assert error in str(set_level(name, level)), name
    finally:
        client.close()


def test_advertised_listeners_change_at_run_time(start_broker):
    """Kafka changes a broker's advertised.listeners without a restart (per broker only): Metadata gives
    clients the new endpoint from then on, and it is kept."""
    broker = start_broker({"node.id": 1})
    a = admin(broker.bootstrap)
    assert a.list_topics(timeout=10).brokers[1].host == "127.0.0.1"
    _set(broker, "1", advertised_listeners=f"PLAINTEXT://localhost:{broker.port}")
    assert admin(broker.bootstrap).list_topics(timeout=10).brokers[1].host == "localhost"
    for name, value in [("1", "SSL://localhost:1"), ("1", "PLAINTEXT//nowhere"), ("", "PLAINTEXT://localhost:1")]:
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            _set(broker, name, advertised_listeners=value)  # no such listener; not a URL; not per broker
    broker.restart()
    entry = _describe(admin(broker.bootstrap), BROKER, "1")["advertised.listeners"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        f"PLAINTEXT://localhost:{broker.port}", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert admin(broker.bootstrap).list_topics(timeout=10).brokers[1].host == "localhost"


def test_connection_limits_change_at_run_time(start_broker):
    """max.connections.per.ip.overrides set for the cluster default binds new connections at once, and
    deleting it lifts the limit again."""
    broker = start_broker({"node.id": 1})

    def served_from(source: str) -> socket.socket | None:
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=10, source_address=(source, 0))
        try:
            api_versions_roundtrip(s, 7)
            return s
        except OSError:
            s.close()
            return None

    _set(broker, "", max_connections_per_ip_overrides="127.0.0.2:1")
    first = served_from("127.0.0.2")
    assert first is not None and served_from("127.0.0.2") is None
    _set(broker, "", max_connections_per_ip_overrides=None)
    second = served_from("127.0.0.2")
    assert second is not None
    for s in (first, second):
        s.close()
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        _set(broker, "", max_connections_per_ip_overrides="nohost")
