"""Dynamic broker configs, as Kafka's DynamicBrokerConfig has them: AlterConfigs / IncrementalAlterConfigs on
the BROKER resource named by a node id (that broker's own) or by "" (the cluster default, ``<default>``).

In force, most specific first: the broker's own dynamic value, the cluster default's, server.properties, the
built-in default. They are kept by the metadata store -- in a cluster the etcd keys
``/configs/brokers/<id>`` and ``/configs/brokers/<default>``, which every broker applies from its watch; a
standalone broker keeps them in ``<log dir>/broker-configs.json``. A listener's TLS stores are set per
broker and kept by that broker alone (security/tls_reload.py: paths on its disk, private keys).

What can change at run time is what Kafka changes at run time (a name Kafka holds static is refused with
INVALID_CONFIG, as Kafka does):

- the topics' defaults (Kafka's DynamicLogConfig: log.retention.*, log.segment.bytes, log.cleanup.policy,
  min.insync.replicas, unclean.leader.election.enable, message.max.bytes, compression.type, ...), applied
  to every log at once; the log cleaner's rate, dedupe buffer and backoff; the connection limits (max.connections, max.connections.per.ip[.overrides],
  max.connection.creation.rate); producer.id.expiration.ms;
- advertised.listeners (per broker): clients are given the new endpoints from the next request on, and a
  cluster's registration names them;
- settings of what Moldau does not have -- thread pools (one event loop serves everything), replication
  throttles (no replica is ever throttled), Kerberos and OAUTHBEARER logins (no GSSAPI or OAUTHBEARER
  mechanism): accepted, stored and described as Kafka
  describes them; there is nothing for them to change.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, NamedTuple

from storage.config import BOOLEAN, DOUBLE, INT, LIST, LONG, LONG_MAX, SHORT, STRING, TOPIC_CONFIGS
from storage.errors import InvalidConfig
from storage.files import atomic_write

from ..errors import ErrorCode
from ..network.connection_quotas import parse_overrides
from ..network.listeners import advertised_listeners_problem
from .broker_config import _BY_NAME, DEDUPE_BYTES_PER_KEY, LISTENER_PREFIX, SETTINGS, ConfigError, broker_log_config
from .config_operations import APPEND, DELETE, SET, SUBTRACT, config_list, list_changed

log = logging.getLogger("moldau.broker_configs")

DEFAULT_ENTITY = "<default>"  # Kafka's name of a default entity: the cluster default, a default quota user
CONFIGS_FILE = "broker-configs.json"


class Inert(NamedTuple):
    """A run-time setting of Kafka's with nothing to act on here."""

    name: str
    type: int
    default: str | None
    check: Callable[[str], str | None]
    per_broker: bool  # Kafka refuses it at the cluster default


def _positive_int(text: str) -> str | None:
    return None if text.strip().lstrip("-").isdigit() and int(text) >= 1 else "must be an integer of at least 1"


def _number(text: str) -> str | None:
    try:
        float(text)
    except ValueError:
        return "must be a number"
    return None


def _anything(text: str) -> str | None:
    return None


INERT = {i.name: i for i in [
    Inert("num.io.threads", INT, "8", _positive_int, False),
    Inert("num.network.threads", INT, "3", _positive_int, False),
    Inert("num.replica.fetchers", INT, "1", _positive_int, False),
    Inert("num.recovery.threads.per.data.dir", INT, "1", _positive_int, False),
    Inert("background.threads", INT, "10", _positive_int, False),
    # replication throttles: no replica is throttled (the topics' throttled replicas are always empty)
    Inert("leader.replication.throttled.rate", LONG, str(LONG_MAX), _positive_int, False),
    Inert("follower.replication.throttled.rate", LONG, str(LONG_MAX), _positive_int, False),
    Inert("replica.alter.log.dirs.io.max.bytes.per.second", LONG, str(LONG_MAX), _positive_int, False),
    Inert("sasl.kerberos.service.name", STRING, None, _anything, True),
    Inert("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", _anything, True),
    Inert("sasl.kerberos.min.time.before.relogin", LONG, "60000", _number, True),
    Inert("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", _number, True),
    Inert("sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", _number, True),
    Inert("sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", _anything, True),
    Inert("sasl.login.refresh.window.factor", DOUBLE, "0.8", _number, True),
    Inert("sasl.login.refresh.window.jitter", DOUBLE, "0.05", _number, True),
    Inert("sasl.login.refresh.min.period.seconds", SHORT, "60", _number, True),
    Inert("sasl.login.refresh.buffer.seconds", SHORT, "300", _number, True),
]}

# Moldau's settings that Kafka's DynamicLogConfig changes at run time: the topics' defaults
LOG_DEFAULTS = frozenset(name for c in TOPIC_CONFIGS.values() if c.dynamic for name in c.synonyms)
CLEANER = frozenset({"log.cleaner.io.max.bytes.per.second", "log.cleaner.dedupe.buffer.size",
                     "log.cleaner.backoff.ms"})  # of Kafka's LogCleaner.ReconfigurableConfigs
CONNECTION_LIMITS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
                               "max.connection.creation.rate"})
APPLIED = LOG_DEFAULTS | CLEANER | CONNECTION_LIMITS | {"producer.id.expiration.ms", "advertised.listeners"}
DYNAMIC = APPLIED | INERT.keys()
PER_BROKER = {"advertised.listeners"} | {i.name for i in INERT.values() if i.per_broker}  # Kafka's PerBrokerConfigs
assert APPLIED <= _BY_NAME.keys()


class DynamicBrokerConfigs:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.static = dict(broker.config.values)  # server.properties over the defaults
        self.entities: dict[str, dict[str, str]] = {}  # "<default>" or a node id -> {name: value}
        self.path = broker.config.log_dir / CONFIGS_FILE

    @property
    def own(self) -> str:
        return str(self.broker.node_id)

    # --- what is in force ------------------------------------------------------------------------

    def layers(self, name: str) -> list[tuple[str, int]]:
        """(value, DescribeConfigs source) of every level that sets ``name``, most specific first."""
        found = [(configs[name], source) for entity, source in ((self.own, 2), (DEFAULT_ENTITY, 3))
                 if name in (configs := self.entities.get(entity, {}))]
        if name in self.broker.config.explicit:
            found.append((config_text(self.static[name]), 4))
        return found

    def in_force_text(self, name: str) -> str | None:
        """A run-time setting's value on this broker, as DescribeConfigs shows it."""
        if name in INERT:
            layers = self.layers(name)
            return layers[0][0] if layers else INERT[name].default
        return config_text(self.broker.config[name])

    def set(self, entity: str, configs: dict[str, str]) -> None:
        """An entity's dynamic configs as they are now (from the store); those of this broker take effect.
        Configs this broker cannot take (stored by another version) are logged and left out; ValueError if
        they are not names and values at all."""
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in (*configs, *configs.values())):
            raise ValueError(f"dynamic broker configs of {entity} are not an object of strings")
        if entity in (self.own, DEFAULT_ENTITY):
            try:
                self.checked(entity, configs)
            except InvalidConfig as exc:
                log.error("dynamic broker configs %s of %s not applied: %s", configs, entity, exc)
                return
        if configs:
            self.entities[entity] = dict(configs)
        else:
            self.entities.pop(entity, None)
        if entity in (self.own, DEFAULT_ENTITY):
            self._apply()

    def _apply(self) -> None:
        values, _ = self._in_force(self.entities)  # checked: no problem
        changed = {n for n in APPLIED if values[n] != self.broker.config.values[n]}
        if not changed:
            return
        self.broker.config.values.update(values)
        if "advertised.listeners" in changed:
            self.broker.advertise()
        if changed & CLEANER:
            self.broker.cleaner.throttler.set_rate(values["log.cleaner.io.max.bytes.per.second"])
            self.broker.cleaner.max_keys = values["log.cleaner.dedupe.buffer.size"] // DEDUPE_BYTES_PER_KEY
        if changed & CONNECTION_LIMITS and self.broker.connection_quotas is not None:
            self.broker.connection_quotas.configure(self.broker.config)
        if changed & LOG_DEFAULTS:
            self.broker.logs.set_default_config(broker_log_config(self.broker.config))
            self.broker.store.configs_changed()
        log.info("dynamic broker configs in force: %s", {n: config_text(values[n]) for n in sorted(changed)})

    def _in_force(self, entities: dict[str, dict[str, str]]) -> tuple[dict[str, object], str | None]:
        """The APPLIED settings' typed values with ``entities``, or an error message."""
        values = {}
        for name in APPLIED:
            text = entities.get(self.own, {}).get(name, entities.get(DEFAULT_ENTITY, {}).get(name))
            if text is None:
                values[name] = self.static[name]
                continue
            setting = _BY_NAME[name]
            try:
                value = setting.parse(text)
            except ValueError as exc:
                return values, f"{name}: invalid value {text!r} ({exc})"
            problem = setting.check(value) if setting.check and value is not None else None
            if problem:
                return values, f"{name}: {problem}, got {text}"
            values[name] = value
        return values, None

    # --- changes ---------------------------------------------------------------------------------

    def entity_of(self, resource_name: str) -> str:
        """The entity a BROKER resource names; InvalidConfig for a name that is not a node id."""
        if resource_name == "":
            return DEFAULT_ENTITY
        if not resource_name.isdigit():
            raise InvalidConfig(f"broker {resource_name!r}: name a node id, or none for the cluster default")
        return str(int(resource_name))

    def checked(self, entity: str, configs: dict[str, str]) -> dict[str, str]:
        """``configs`` if Kafka would take them for ``entity`` and they make valid topic configs; else
        InvalidConfig naming what is wrong."""
        static = [n for n in configs if n not in DYNAMIC]
        if static:
            raise InvalidConfig(f"Cannot update these configs dynamically: {sorted(static)}")
        if entity == DEFAULT_ENTITY:
            per_broker = [n for n in configs if n in PER_BROKER]
            if per_broker:
                raise InvalidConfig(f"Cannot update these configs at default cluster level, broker id must be "
                                    f"specified: {sorted(per_broker)}")
        for name, value in configs.items():
            problem = INERT[name].check(value) if name in INERT else None
            if problem:
                raise InvalidConfig(f"{name}: {problem}, got {value}")
        values, problem = self._in_force({**self.entities, entity: configs})
        if problem:
            raise InvalidConfig(problem)
        problem = advertised_listeners_problem(_Overlay(self.broker.config, values))
        if problem:
            raise InvalidConfig(problem)
        try:
            parse_overrides(values["max.connections.per.ip.overrides"])
            defaults = broker_log_config(_Overlay(self.broker.config, values))
            for topic in self.broker.logs.topics.values():
                defaults.with_topic_configs(topic.configs)
        except (ConfigError, InvalidConfig) as exc:
            raise InvalidConfig(str(exc)) from None
        return configs

    # --- standalone storage ---------------------------------------------------------------------

    def load(self) -> None:
        """The dynamic configs an earlier run of a standalone broker stored."""
        try:
            stored = json.loads(self.path.read_text()) if self.path.exists() else {}
            if not isinstance(stored, dict):
                raise ValueError("not an object")
            for entity, configs in stored.items():
                self.set(entity, configs)
        except (OSError, ValueError) as exc:
            log.error("dynamic broker configs in %s not applied (%s): server.properties' are in force", self.path,
                      exc)

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.entities, indent=1, sort_keys=True).encode())


async def alter(broker, resource_name: str, changes: dict[str, tuple[int, str | None]], replace: bool,
                validate_only: bool) -> tuple[int, str | None]:
    """AlterConfigs (``replace``: the configs given are all the entity has) or IncrementalAlterConfigs
    ({name: (SET, DELETE, APPEND or SUBTRACT, value)}) on a BROKER resource. Returns (error code, message)."""
    if any(op not in (SET, DELETE, APPEND, SUBTRACT) for op, _ in changes.values()):
        return ErrorCode.INVALID_REQUEST, "unknown config operation"
    tls = {n: value if op == SET else None for n, (op, value) in changes.items() if n.startswith(LISTENER_PREFIX)}
    if tls:
        if any(changes[n][0] not in (SET, DELETE) for n in tls):
            return ErrorCode.INVALID_REQUEST, "a TLS store is set or deleted, not appended to"
        code, message = broker.tls_contexts.alter(resource_name, tls, validate_only)
        if code or len(tls) == len(changes):
            return code, message
    dynamic = {n: change for n, change in changes.items() if n not in tls}

    def change(current: dict[str, str]) -> dict[str, str]:
        wanted = {} if replace else dict(current)
        for name, (op, value) in dynamic.items():
            if op == SET:
                wanted[name] = value
            elif op == DELETE:
                wanted.pop(name, None)
            elif name in DYNAMIC and setting_type(name) == LIST:
                in_force = wanted.get(name, broker.broker_configs.in_force_text(name))
                wanted[name] = list_changed(config_list(in_force), op, value)
            else:
                raise InvalidConfig(f"{name} is not a list: it cannot be appended to or subtracted from")
        return broker.broker_configs.checked(entity, wanted)

    try:
        entity = broker.broker_configs.entity_of(resource_name)
        await broker.store.alter_broker_configs(entity, change, validate_only)
    except InvalidConfig as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except OSError as exc:
        log.error("dynamic broker configs not stored: %s", exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"not stored: {exc}"
    return ErrorCode.NONE, None


class _Overlay:
    """A BrokerConfig with other values for some settings, to check a change before making it."""

    def __init__(self, config, values: dict[str, object]) -> None:
        self._config, self._values = config, values

    def __getitem__(self, name: str):
        return self._values[name] if name in self._values else self._config[name]

    @property
    def retention_ms(self) -> int:
        return type(self._config).retention_ms.fget(self)


def config_text(value) -> str | None:
    """A setting's value as DescribeConfigs and the stores write it."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


_LISTS = frozenset({"sasl.enabled.mechanisms", "ssl.enabled.protocols"})  # Kafka's LIST type
# the topics' defaults: the type of the topic config each gives
_TOPIC_DEFAULT_TYPES = {c.broker: c.type for c in TOPIC_CONFIGS.values() if c.broker}


def setting_type(name: str) -> int:
    """DescribeConfigs' config type of a broker setting."""
    if name in INERT:
        return INERT[name].type
    if name in _TOPIC_DEFAULT_TYPES:
        return _TOPIC_DEFAULT_TYPES[name]
    if name in _LISTS:
        return LIST
    default = _BY_NAME[name].default
    types = {bool: BOOLEAN, float: DOUBLE, str: STRING}
    return types.get(type(default), LONG if name.endswith(".ms") else INT)


def describable() -> list[str]:
    return [s.name for s in SETTINGS] + list(INERT)


def default_text(name: str) -> str | None:
    return INERT[name].default if name in INERT else config_text(_BY_NAME[name].default)

