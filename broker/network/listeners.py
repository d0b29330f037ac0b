"""Listeners as Kafka names them: `listeners`, `advertised.listeners` and `listener.security.protocol.map`.

A listener's name is what the URL's scheme says (`PLAINTEXT://`, `INTERNAL://`); its security protocol
is what the map says that name uses. A name the map does not know, or a protocol this broker cannot
serve, stops the broker before it binds: serving such a listener as plaintext would hand its data to
anyone who connects.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from ..config.broker_config import LISTENER_PREFIX, SETTINGS, BrokerConfig, ConfigError, parse_listener
from ..security import sasl, tls

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
IMPLEMENTED = frozenset(SECURITY_PROTOCOLS)


@dataclass(frozen=True)
class Listener:
    name: str  # as written in `listeners`, upper case (Kafka's ListenerName)
    security_protocol: str
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    sasl_settings: sasl.SaslSettings | None = field(default=None, compare=False)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    """listener.security.protocol.map: 'NAME:PROTOCOL,...' -> {NAME: PROTOCOL}."""
    mapping = {}
    for item in str(config["listener.security.protocol.map"]).split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map: {item.strip()!r} is not NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
        mapping[name] = protocol
    return mapping


def _urls(text: str) -> dict[str, tuple[str, int]]:
    endpoints = {}
    for url in text.split(","):
        if url.strip():
            name, host, port = parse_listener(url)
            if name.upper() in endpoints:
                raise ConfigError(f"listener name {name.upper()} appears twice in {text!r}")
            endpoints[name.upper()] = (host, port)
    return endpoints


def advertised_endpoints(config: BrokerConfig) -> dict[str, tuple[str, int]]:
    """Listener name -> the host and port clients of that listener are given (a cluster registers them all)."""
    bound = _urls(str(config["listeners"]))
    advertised = _urls(str(config["advertised.listeners"])) if config["advertised.listeners"] else {}
    return {name: (advertised.get(name, bound[name])[0] or "127.0.0.1", advertised.get(name, bound[name])[1])
            for name in bound}


def advertised_listeners_problem(config: BrokerConfig) -> str | None:
    """What is wrong with advertised.listeners (a URL, a name that is not one of the listeners), or None."""
    try:
        bound = _urls(str(config["listeners"]))
        advertised = _urls(str(config["advertised.listeners"])) if config["advertised.listeners"] else {}
    except ConfigError as exc:
        return str(exc)
    stray = [name for name in advertised if name not in bound]
    return f"advertised.listeners: {stray[0]} is not one of the listeners ({', '.join(bound)})" if stray else None


def inter_broker_listener(config: BrokerConfig) -> str:
    """The name of the listener brokers use between them: inter.broker.listener.name, or the first listener."""
    return str(config["inter.broker.listener.name"]).upper() or next(iter(_urls(str(config["listeners"]))))


def inter_broker_endpoint(config: BrokerConfig) -> tuple[str, int]:
    """Where other brokers reach this one: the advertised address of inter.broker.listener.name (default:
    the first listener), so replication can take another path than the clients."""
    return advertised_endpoints(config)[inter_broker_listener(config)]


def resolve(config: BrokerConfig) -> list[Listener]:
    """The listeners to bind, each with its security protocol and TLS context.

    Raises ConfigError for a name without a protocol or a protocol that is not implemented."""
    mapping = protocol_map(config)
    bound = _urls(str(config["listeners"]))
    problem = advertised_listeners_problem(config)
    if problem:
        raise ConfigError(problem)
    _check_per_listener(config, bound)
    _check_inter_broker_listener(config, bound)
    listeners = []
    for name, (host, port) in bound.items():
        protocol = mapping.get(name)
        if protocol is None:
            raise ConfigError(f"listeners: no security protocol defined for listener {name} "
                              "(add it to listener.security.protocol.map)")
        if protocol not in IMPLEMENTED:
            raise ConfigError(f"listener {name}://{host}:{port}: security protocol {protocol} is not implemented "
                              f"(implemented: {', '.join(sorted(IMPLEMENTED))})")
        context = tls.server_context(config, name) if protocol in ("SSL", "SASL_SSL") else None
        settings = sasl.listener_settings(config, name) if protocol.startswith("SASL_") else None
        listeners.append(Listener(name, protocol, host, port, context, settings))
    return listeners


def _check_inter_broker_listener(config: BrokerConfig, bound: dict) -> None:
    """inter.broker.listener.name: one of the listeners (how brokers log in there: cluster/client_security.py)."""
    name = str(config["inter.broker.listener.name"]).upper()
    if name and name not in bound:
        raise ConfigError(f"inter.broker.listener.name: {name} is not one of the listeners ({', '.join(bound)})")


def _check_per_listener(config: BrokerConfig, bound: dict) -> None:
    """listener.name.<listener>.[<mechanism>.]<name>: a listener that exists and a name Kafka has."""
    known = {s.name for s in SETTINGS}
    for key in config.per_listener:
        listener, _, name = key[len(LISTENER_PREFIX):].partition(".")
        if listener.upper() not in bound:
            raise ConfigError(f"{key}: there is no listener {listener.upper()} in listeners")
        if name not in known and name.partition(".")[2] not in known:
            raise ConfigError(f"{key}: unknown config {name}")
