"""Broker configuration: Kafka's property names, a properties file, overrides."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker.group.assignors import ASSIGNORS
from storage.config import (
    BOOLEAN,
    DOUBLE,
    INT,
    LONG,
    MAX_SEGMENT_BYTES,
    MIN_SEGMENT_BYTES,
    TOPIC_CONFIGS,
    LogConfig,
    TopicConfig,
)
from storage.errors import InvalidConfig

from .kafka_configs import KAFKA_BROKER_CONFIGS
from .log_levels import log_levels_problem


def _bool(text: str) -> bool:
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _optional_int(text: str) -> int | None:
    text = text.strip()
    return None if text in ("", "none", "None") else int(text)


def at_least(low: int) -> Callable[[object], str | None]:
    return lambda value: None if value >= low else f"must be at least {low}"


def between(low: int, high: int) -> Callable[[object], str | None]:
    return lambda value: None if low <= value <= high else f"must be in [{low}, {high}]"


def assignors_problem(value: str) -> str | None:

    names = [n.strip() for n in value.split(",")]
    unknown = [n for n in names if n not in ASSIGNORS]
    if unknown or not value.strip():
        return f"assignors are {', '.join(ASSIGNORS)}"
    return None


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], object]
    default: object
    doc: str
    check: Callable[[object], str | None] | None = None  # an error message for a value Kafka refuses


def _topic_default(config: TopicConfig) -> Setting:
    """The broker setting giving a topic config's default: of its type, checked as it is, its doc."""
    parse = {BOOLEAN: _bool, DOUBLE: float, INT: int, LONG: int}.get(config.type, str)
    default = None if config.broker_unset else parse(config.default)

    def check(value) -> str | None:
        return config.problem(str(value)) if config.enforced else None

    return Setting(config.broker, parse if default is not None else _optional(parse), default,
                   f"{config.doc} Topics' default {config.name}.", check)


def _optional(parse: Callable[[str], object]) -> Callable[[str], object]:
    return lambda text: None if text.strip() in ("", "none", "None") else parse(text)


TOPIC_DEFAULTS = sorted((_topic_default(c) for c in TOPIC_CONFIGS.values() if c.broker), key=lambda s: s.name)

SETTINGS: list[Setting] = [
    Setting("listeners", str, "PLAINTEXT://127.0.0.1:9092", "Comma-separated listener URLs to bind."),
    Setting("advertised.listeners", str, "", "Listener URLs given to clients (default: listeners)."),
    Setting("listener.security.protocol.map", str,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Security protocol of each listener name, NAME:PROTOCOL,..."),
    Setting("inter.broker.listener.name", str, "",
            "The listener other brokers fetch from (its advertised address); empty: the first listener."),
    Setting("sasl.mechanism.inter.broker.protocol", str, "GSSAPI",
            "The SASL mechanism brokers log in with when inter.broker.listener.name is a SASL listener."),
    Setting("log.dirs", str, "", "Data directory (default: log.dir); one directory, JBOD is not supported."),
    Setting("log.dir", str, "./moldau-data", "Data directory when log.dirs is not set."),
    Setting("node.id", int, 1, "This broker's id."),
    Setting("log.file", str, "", "Write the broker's log to this file (reopened when logrotate moves it); "
            "empty: stderr, for systemd's journal or docker logs."),
    Setting("log.level", str, "INFO", "Log levels, log4j-style: INFO, or INFO,moldau.server=DEBUG.",
            log_levels_problem),
    Setting("num.partitions", int, 1, "Partitions of an auto-created topic.", at_least(1)),
    Setting("auto.create.topics.enable", _bool, True, "Create unknown topics on Metadata and Produce."),
    *TOPIC_DEFAULTS,  # log.segment.bytes, ...: storage.config.TOPIC_CONFIGS' broker synonyms
    Setting("log.retention.hours", int, 168, "Delete a segment whose newest record is this old (-1: forever).",
            at_least(-1)),
    Setting("log.retention.minutes", _optional_int, None, "Like log.retention.hours; wins over it when set.",
            at_least(-1)),
    Setting("log.retention.check.interval.ms", int, 300_000, "How often retention is applied.", at_least(1)),
    Setting("log.cleaner.enable", _bool, True, "Run the log cleaner for compacted topics."),
    Setting("log.cleaner.threads", int, 1, "Threads cleaning compacted logs.", at_least(1)),
    Setting("log.cleaner.io.max.bytes.per.second", float, 1.7976931348623157e308,
            "Bytes per second all cleaner threads may read and write together.", at_least(1)),
    Setting("log.cleaner.dedupe.buffer.size", int, 134_217_728,
            "Bounds the keys one cleaning pass maps (24 bytes each, as in Kafka); more take several passes.",
            at_least(24)),
    Setting("log.cleaner.backoff.ms", int, 15_000, "How long the cleaner sleeps when no log needs cleaning.",
            at_least(0)),
    Setting("socket.request.max.bytes", int, 100 * 1024 * 1024, "Largest request frame accepted."),
    Setting("queued.max.requests", int, 500, "Requests read but not yet handled, all connections together; "
            "past it connections stop reading.", at_least(1)),
    Setting("max.connections", int, 2**31 - 1,
            "Most client connections at once (also capped by the open-file limit).", between(0, 2**31 - 1)),
    Setting("max.connections.per.ip", int, 2**31 - 1, "Most connections from one address.", between(0, 2**31 - 1)),
    Setting("max.connections.per.ip.overrides", str, "", "Per-address exceptions: host:count,host:count."),
    Setting("max.connection.creation.rate", int, 2**31 - 1,
            "New connections accepted a second; more wait for their turn (KIP-612).", between(1, 2**31 - 1)),
    Setting("quota.window.num", int, 11, "Windows client quota rates are measured over.", between(1, 2**31 - 1)),
    Setting("quota.window.size.seconds", int, 1, "Length of one client quota window.", between(1, 2**31 - 1)),
    Setting("connections.max.idle.ms", int, 600_000, "Close a connection idle this long.", between(1, 2**63 - 1)),
    Setting("fetch.max.bytes", int, 55 * 1024 * 1024, "Most bytes one Fetch response carries (the first batch excepted).",
            at_least(1024)),
    Setting("metrics.port", _optional_int, None, "Serve Prometheus metrics on this port (default: off).",
            between(0, 65535)),
    Setting("metrics.host", str, "127.0.0.1", "Address the Prometheus metrics endpoint binds."),
    Setting("console.port", _optional_int, None,
            "Serve the web console (moldau console) on this port, reading this broker's cluster through its first "
            "listener (default: off; needs pip install 'moldau[console]').", between(0, 65535)),
    Setting("console.host", str, "127.0.0.1", "Address the web console binds."),
    Setting("console.command.config", str, "",
            "Client properties the console connects with (a SASL or TLS first listener), as --command-config."),
    Setting("max.incremental.fetch.session.cache.slots", int, 1000,
            "Incremental fetch sessions (KIP-227) the broker keeps; 0 answers every Fetch sessionless.", at_least(0)),
    Setting("group.initial.rebalance.delay.ms", int, 3000,
            "How long an empty group waits for more members before its first rebalance."),
    Setting("group.max.size", int, 2**31 - 1, "Most members a consumer group may have (GROUP_MAX_SIZE_REACHED).",
            between(1, 2**31 - 1)),
    Setting("group.min.session.timeout.ms", int, 6000, "Smallest session.timeout.ms a group member may ask for."),
    Setting("group.max.session.timeout.ms", int, 1_800_000, "Largest session.timeout.ms a group member may ask for."),
    # KIP-848 consumer groups (group.protocol=consumer)
    Setting("group.consumer.heartbeat.interval.ms", int, 5000,
            "How often a consumer-protocol member heartbeats (told in every ConsumerGroupHeartbeat).", at_least(1)),
    Setting("group.consumer.session.timeout.ms", int, 45000,
            "A consumer-protocol member that does not heartbeat for this long is removed.", at_least(1)),
    Setting("group.consumer.min.heartbeat.interval.ms", int, 5000,
            "Smallest heartbeat interval of a consumer-protocol group (the broker's and any group's "
            "consumer.heartbeat.interval.ms).", at_least(1)),
    Setting("group.consumer.max.heartbeat.interval.ms", int, 15000,
            "Largest heartbeat interval of a consumer-protocol group.", at_least(1)),
    Setting("group.consumer.min.session.timeout.ms", int, 45000,
            "Smallest session timeout of a consumer-protocol group (the broker's and any group's "
            "consumer.session.timeout.ms).", at_least(1)),
    Setting("group.consumer.max.session.timeout.ms", int, 60000,
            "Largest session timeout of a consumer-protocol group.", at_least(1)),
    Setting("group.consumer.max.size", int, 2**31 - 1,
            "Most members a consumer-protocol group may have (GROUP_MAX_SIZE_REACHED).", between(1, 2**31 - 1)),
    Setting("group.consumer.assignors", str, "uniform,range",
            "Server-side assignors a member may name; the first is the default.", assignors_problem),
    # KIP-932 share groups
    Setting("group.share.enable", _bool, True, "Serve share groups (ShareGroupHeartbeat, ShareFetch, ...)."),
    Setting("group.share.heartbeat.interval.ms", int, 5000, "How often a share group member heartbeats.",
            at_least(1)),
    Setting("group.share.session.timeout.ms", int, 45000,
            "A share group member that does not heartbeat for this long is removed.", at_least(1)),
    Setting("group.share.min.heartbeat.interval.ms", int, 5000,
            "Smallest heartbeat interval of a share group (the broker's and any group's "
            "share.heartbeat.interval.ms).", at_least(1)),
    Setting("group.share.max.heartbeat.interval.ms", int, 15000, "Largest heartbeat interval of a share group.",
            at_least(1)),
    Setting("group.share.min.session.timeout.ms", int, 45000,
            "Smallest session timeout of a share group (the broker's and any group's share.session.timeout.ms).",
            at_least(1)),
    Setting("group.share.max.session.timeout.ms", int, 60000, "Largest session timeout of a share group.",
            at_least(1)),
    Setting("group.share.max.size", int, 200, "Most members a share group may have (GROUP_MAX_SIZE_REACHED).",
            between(1, 1000)),
    Setting("group.share.max.groups", int, 10, "Most share groups a coordinator serves.", between(1, 100)),
    Setting("group.share.record.lock.duration.ms", int, 30000,
            "How long a share consumer holds an acquired record before it is released for redelivery.",
            between(1000, 3_600_000)),
    Setting("group.share.delivery.count.limit", int, 5,
            "Deliveries of a record before it is archived instead of released again.", between(2, 10)),
    Setting("group.share.partition.max.record.locks", int, 2000,
            "Most in-flight records (acquired or awaiting redelivery) per share partition.", between(100, 10000)),
    Setting("share.coordinator.state.topic.num.partitions", int, 50,
            "Partitions of __share_group_state when the broker creates it.", at_least(1)),
    Setting("share.coordinator.state.topic.replication.factor", int, 3,
            "Replicas of __share_group_state's partitions (at most the live brokers).", at_least(1)),
    Setting("share.coordinator.state.topic.min.isr", int, 2, "min.insync.replicas of __share_group_state.",
            at_least(1)),
    Setting("offsets.topic.num.partitions", int, 50, "Partitions of __consumer_offsets when the broker creates it.",
            at_least(1)),
    Setting("offsets.topic.segment.bytes", int, 104_857_600, "segment.bytes of __consumer_offsets when the broker "
            "creates it (small segments are cleaned sooner).", between(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)),
    Setting("offsets.retention.minutes", int, 10080, "Committed offsets of an empty group expire after this long."),
    Setting("offsets.retention.check.interval.ms", int, 600_000, "How often expired offsets are looked for."),
    Setting("offset.metadata.max.bytes", int, 4096, "Longest metadata string an offset commit may carry."),
    Setting("offsets.commit.required.acks", int, -1, "-1: a group coordinator answers once its write is committed "
            "(acks=all); 1: once the leader has it.", lambda v: None if v in (-1, 1) else "must be -1 or 1"),
    Setting("offsets.commit.timeout.ms", int, 5000, "How long a group coordinator's write may wait to be committed.",
            at_least(1)),
    Setting("producer.id.expiration.ms", int, 24 * 3600 * 1000,
            "Forget a partition's state of a producer idle this long."),
    Setting("producer.id.expiration.check.interval.ms", int, 600_000, "How often idle producers are looked for."),
    Setting("transaction.state.log.num.partitions", int, 50,
            "Partitions of __transaction_state when the broker creates it.", at_least(1)),
    Setting("transaction.state.log.segment.bytes", int, 104_857_600, "segment.bytes of __transaction_state when "
            "the broker creates it.", between(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)),
    Setting("transaction.max.timeout.ms", int, 900_000, "Largest transaction.timeout.ms a producer may ask for."),
    Setting("transactional.id.expiration.ms", int, 7 * 24 * 3600 * 1000,
            "Forget a transactional id that has not been used for this long."),
    Setting("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10_000,
            "How often transactions past their timeout are looked for (and aborted)."),
    Setting("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3_600_000,
            "How often expired transactional ids are looked for."),
    # security (each may be set for one listener as listener.name.<listener>.<name>)
    Setting("ssl.keystore.type", str, "PEM", "Format of the key store: PEM."),
    Setting("ssl.keystore.location", str, "", "PEM file holding the private key and its certificate chain."),
    Setting("ssl.keystore.key", str, "", "The private key as PEM text (with ssl.keystore.certificate.chain)."),
    Setting("ssl.keystore.certificate.chain", str, "", "The certificate chain as PEM text."),
    Setting("ssl.key.password", str, "", "Password of an encrypted private key."),
    Setting("ssl.truststore.type", str, "PEM", "Format of the trust store: PEM."),
    Setting("ssl.truststore.location", str, "", "PEM file of the CA certificates client certificates are checked against."),
    Setting("ssl.truststore.certificates", str, "", "The trusted CA certificates as PEM text."),
    Setting("ssl.client.auth", str, "none", "Client certificates: none, requested or required."),
    Setting("ssl.enabled.protocols", str, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    Setting("ssl.principal.mapping.rules", str, "DEFAULT", "Certificate subject to principal name: DEFAULT."),
    Setting("sasl.enabled.mechanisms", str, "GSSAPI",
            "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512."),
    Setting("sasl.jaas.config", str, "", "PLAIN's users: PlainLoginModule required user_<name>=\"<password>\" ...;"),
    Setting("sasl.server.max.receive.size", int, 524288, "Largest request accepted before authentication."),
    Setting("connection.failed.authentication.delay.ms", int, 100,
            "How long a failed authentication waits before its answer and the close."),
    Setting("connections.max.reauth.ms", int, 0,
            "SASL session lifetime (KIP-368): a client must re-authenticate within it or its next request closes "
            "the connection; 0: sessions never expire."),
    # the cluster (docs/architecture.md); without etcd.connect the broker runs alone
    Setting("etcd.connect", str, "", "etcd endpoints host:port[,host:port...][/chroot]; empty: a standalone broker."),
    Setting("etcd.session.timeout.ms", int, 9_000, "A broker is gone when etcd has not heard from it this long."),
    Setting("etcd.audit.interval.ms", int, 60_000, "How often a broker compares its view of the cluster with etcd's "
            "keys (moldau_etcd_view_divergences counts differences; each is repaired by a resync).",
            between(100, 2**31 - 1)),
    Setting("default.replication.factor", int, 1, "Replicas of an auto-created or unspecified-factor topic."),
    Setting("auto.leader.rebalance.enable", _bool, True,
            "The controller moves leadership back to preferred replicas that are in sync."),
    Setting("leader.imbalance.check.interval.seconds", int, 300, "How often the controller looks for that."),
    Setting("replica.lag.time.max.ms", int, 30_000, "A follower not caught up for this long leaves the ISR."),
    Setting("replica.fetch.wait.max.ms", int, 500, "How long a follower's fetch waits at the leader for data."),
    Setting("replica.fetch.max.bytes", int, 1_048_576, "Bytes a follower asks for per partition and fetch."),
    Setting("replica.high.watermark.checkpoint.interval.ms", int, 5_000,
            "How often a replica's high watermarks are written to replication-offset-checkpoint."),
    Setting("request.timeout.ms", int, 30_000,
            "How long a broker waits for another's answer, and a marker for its replicas.", between(1, 2**31 - 1)),
    Setting("offsets.topic.replication.factor", int, 3,
            "Replicas of __consumer_offsets (as many as there are live brokers if fewer)."),
    Setting("transaction.state.log.replication.factor", int, 3,
            "Replicas of __transaction_state (as many as there are live brokers if fewer)."),
    Setting("transaction.state.log.min.isr", int, 2, "min.insync.replicas of __transaction_state (capped likewise)."),
    Setting("authorizer.class.name", str, "",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer: check every request against ACLs."),
    Setting("super.users", str, "", "Principals the authorizer always allows, User:name;User:other."),
    Setting("allow.everyone.if.no.acl.found", _bool, False, "Allow access to a resource no ACL names."),
]
_BY_NAME = {s.name: s for s in SETTINGS}
LISTENER_PREFIX = "listener.name."


class ConfigError(ValueError):
    pass


# Kafka's names that Moldau does not implement: reported as "not supported", never as unknown
NOT_SUPPORTED = KAFKA_BROKER_CONFIGS - _BY_NAME.keys()


def _broker_id_as_node_id(values: dict[str, str]) -> dict[str, str]:
    """broker.id, the older name many server.properties still use, is node.id; both set and different is
    an error, as in Kafka."""
    if "broker.id" not in values:
        return values
    text = values.pop("broker.id")
    try:
        broker_id = int(text)
    except ValueError:
        raise ConfigError(f"broker.id: invalid value {text!r} (not an integer)") from None
    if broker_id < 0:
        raise ConfigError(f"broker.id: generated ids ({text}) are not supported; set broker.id or node.id to this "
                          f"broker's id")
    if "node.id" in values and values["node.id"].strip() != str(broker_id):
        raise ConfigError(f"broker.id {broker_id} and node.id {values['node.id'].strip()} differ: "
                          f"set node.id to the same value as broker.id, or leave one out")
    values["node.id"] = str(broker_id)
    return values


def read_properties(path: Path) -> dict[str, str]:
    """Java-style .properties: key=value or key: value, # and ! comments."""
    props: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}: cannot parse line {raw!r}")
        props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


class BrokerConfig:
    """Typed values by Kafka name, checked as Kafka checks them (ConfigError); unknown names are kept
    (and reported, see ``warnings``) but unused."""

    def __init__(self, values: dict[str, str] | None = None):
        self.values: dict[str, object] = {s.name: s.default for s in SETTINGS}
        self.unknown: dict[str, str] = {}
        self.per_listener: dict[str, str] = {}  # listener.name.<listener>.<name>, parsed on use
        values = _broker_id_as_node_id(dict(values or {}))
        self.explicit = frozenset(name for name in values if name in _BY_NAME)  # set, not defaulted
        for name, text in values.items():
            if name.startswith(LISTENER_PREFIX):
                self.per_listener[name] = text
                continue
            setting = _BY_NAME.get(name)
            if setting is None:
                self.unknown[name] = text
                continue
            try:
                value = setting.parse(text)
            except ValueError as exc:
                raise ConfigError(f"{name}: invalid value {text!r} ({exc})") from None
            problem = setting.check(value) if setting.check and value is not None else None
            if problem:
                raise ConfigError(f"{name}: {problem}, got {text}")
            self.values[name] = value
        if len(self._log_dirs()) != 1:
            raise ConfigError(f"log.dirs: exactly one directory is supported (no JBOD), got {self['log.dirs']!r}")
        for group_type in ("consumer", "share"):
            self._check_group_bounds(group_type)

    def _check_group_bounds(self, group_type: str) -> None:
        """A group type's (KIP-848's, KIP-932's) defaults within their bounds, as Kafka's GroupCoordinatorConfig
        requires at start."""
        for kind in ("heartbeat.interval", "session.timeout"):
            name, low, high = (f"group.{group_type}.{kind}.ms", f"group.{group_type}.min.{kind}.ms",
                               f"group.{group_type}.max.{kind}.ms")
            if self[high] < self[low]:
                raise ConfigError(f"{high} must be greater than or equal to {low}")
            if not self[low] <= self[name] <= self[high]:
                raise ConfigError(f"{name} must be in [{low}, {high}] = [{self[low]}, {self[high]}], "
                                  f"got {self[name]}")
        if self[f"group.{group_type}.heartbeat.interval.ms"] >= self[f"group.{group_type}.session.timeout.ms"]:
            raise ConfigError(f"group.{group_type}.heartbeat.interval.ms must be less than "
                              f"group.{group_type}.session.timeout.ms")

    def warnings(self) -> list[str]:
        """One line per name this broker ignores: Kafka's that Moldau lacks, and typos with a suggestion."""
        lines = []
        for name in self.unknown:
            if name in NOT_SUPPORTED:
                lines.append(f"{name} is a Kafka broker config that Moldau does not support; ignored")
                continue
            # names Moldau implements first: a typo of one is the likelier mistake
            match = difflib.get_close_matches(name, _BY_NAME, 1, 0.8) or difflib.get_close_matches(
                name, NOT_SUPPORTED, 1, 0.8)
            hint = f"; did you mean {match[0]}?" if match else ""
            lines.append(f"unknown config {name}{hint} (ignored)")
        return lines

    def __getitem__(self, name: str):
        return self.values[name]

    def for_listener(self, listener: str, name: str, mechanism: str = ""):
        """Kafka's listener.name.<listener>.[<mechanism>.]<name> if set, else <name>."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        for key in ([f"{prefix}{mechanism.lower()}.{name}"] if mechanism else []) + [prefix + name]:
            if key in self.per_listener:
                try:
                    return _BY_NAME[name].parse(self.per_listener[key])
                except ValueError as exc:
                    raise ConfigError(f"{key}: {exc}") from None
        return self[name]

    @classmethod
    def load(cls, path: Path | None, overrides: list[str]) -> "BrokerConfig":
        values = read_properties(path) if path else {}
        for item in overrides:
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--override needs name=value, got {item!r}")
            values[name.strip()] = value.strip()
        return cls(values)

    @property
    def log_dir_setting(self) -> str:
        """The name the data directory was given by: log.dirs, or log.dir when log.dirs is not set."""
        return "log.dirs" if self["log.dirs"] else "log.dir"

    def _log_dirs(self) -> list[str]:
        """log.dirs, or log.dir when that is not set, as in Kafka."""
        return [d.strip() for d in str(self["log.dirs"] or self["log.dir"]).split(",") if d.strip()]

    @property
    def retention_ms(self) -> int:
        """log.retention.ms, else log.retention.minutes, else log.retention.hours (Kafka's precedence)."""
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        return self["log.retention.hours"] * 3_600_000

    @property
    def log_dir(self) -> Path:
        return Path(self._log_dirs()[0])

    def advertised(self) -> tuple[str, int]:
        """The host and port clients are told to use (first advertised listener)."""
        urls = str(self["advertised.listeners"]) or str(self["listeners"])
        _, host, port = parse_listener(urls.split(",")[0])
        return (host or "127.0.0.1"), port


def parse_listener(url: str) -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> (name, host, port); an empty host means every interface."""
    name, sep, rest = url.strip().partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not name:
        raise ConfigError(f"listener {url.strip()!r} has no listener name: write it as PLAINTEXT://host:port")
    if not colon or not port_text.isdigit():
        raise ConfigError(f"listener {url.strip()!r} has no port: write it as {name}://host:port")
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"listener {url.strip()!r}: port {port} is not in [0, 65535]")
    return name, host.strip("[]"), port


def shown_default(setting: Setting) -> str:
    """A default as an operator writes it, not as Python prints it (None, 1.7976931348623157e+308)."""
    value = setting.default
    if value is None or value == "":
        return "not set"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value >= 1e300:
        return "no limit"
    return str(value)


def describe_settings() -> str:
    width = max(len(s.name) for s in SETTINGS)
    return "\n".join(f"  {s.name:<{width}}  {s.doc} (default: {shown_default(s)})" for s in SETTINGS)


# Kafka sizes the cleaner's map in entries of a 16-byte key hash and an 8-byte offset
DEDUPE_BYTES_PER_KEY = 24



def broker_log_config(config: "BrokerConfig") -> LogConfig:
    """The topics' defaults from the broker settings TOPIC_CONFIGS names as their synonyms; raises ConfigError."""
    texts = {c.name: str(config[c.broker]) for c in TOPIC_CONFIGS.values()
             if c.enforced and c.broker and config[c.broker] is not None}
    texts["retention.ms"] = str(config.retention_ms)  # of log.retention.ms, .minutes or .hours
    try:
        return LogConfig().with_topic_configs(texts)
    except InvalidConfig as exc:
        raise ConfigError(f"invalid log configuration: {exc}") from None
