"""How this broker connects to the others: as a client of inter.broker.listener.name (default: the first
listener), with that listener's security protocol, as Kafka's brokers do.

SSL / SASL_SSL: the listener's trust store checks the other broker's certificate and its host name (Kafka's
default ssl.endpoint.identification.algorithm=https); its key store is the client certificate (mutual TLS).
SASL_PLAINTEXT / SASL_SSL: sasl.mechanism.inter.broker.protocol (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)
with the username and password options of the listener's JAAS config for it, e.g.
`listener.name.internal.plain.sasl.jaas.config=...PlainLoginModule required username="broker"
password="..." user_broker="...";`. The principal needs ClusterAction on the cluster (or super.users).

The admin tools build theirs from Kafka client properties instead (from_properties: --command-config).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

import scramp

from broker.config.broker_config import BrokerConfig, ConfigError
from broker.errors import ErrorCode
from broker.network.listeners import protocol_map
from broker.security import jaas, sasl, tls

P = TypeVar("P", bound=asyncio.BaseProtocol)
Exchange = Callable[[str, int, dict], Awaitable[dict]]  # one request on the new connection -> its response


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    async def open(self, host: str, port: int, protocol: Callable[[], P]) -> P:
        """A connection to ``host``:``port``, TLS as configured, served by a new ``protocol()``."""
        _, connected = await asyncio.get_running_loop().create_connection(
            protocol, host, port, ssl=self.ssl_context, server_hostname=host if self.ssl_context else None)
        return connected

    async def authenticate(self, exchange: Exchange) -> None:
        """The SASL exchange on a new connection; ConnectionRefusedError if the other broker refuses it."""
        if self.mechanism is None:
            return
        handshake = await exchange("SaslHandshake", 1, {"mechanism": self.mechanism})
        if handshake["error_code"]:
            raise ConnectionRefusedError(f"SaslHandshake {self.mechanism}: {ErrorCode(handshake['error_code']).name}")
        if self.mechanism == "PLAIN":
            await self._step(exchange, f"\0{self.username}\0{self.password}".encode())
            return
        client = scramp.ScramClient([self.mechanism], self.username, self.password)
        client.set_server_first((await self._step(exchange, client.get_client_first().encode())).decode())
        final = await self._step(exchange, client.get_client_final().encode())
        try:
            client.set_server_final(final.decode())
        except scramp.ScramException as exc:  # the other side does not know the password: not a broker of ours
            raise ConnectionRefusedError(f"{self.mechanism}: the broker's signature is wrong ({exc})") from None

    @staticmethod
    async def _step(exchange: Exchange, token: bytes) -> bytes:
        answer = await exchange("SaslAuthenticate", 2, {"auth_bytes": token})
        if answer["error_code"]:
            raise ConnectionRefusedError(f"SaslAuthenticate: {ErrorCode(answer['error_code']).name} "
                                         f"({answer['error_message']})")
        return bytes(answer["auth_bytes"])


def from_config(config: BrokerConfig) -> ClientSecurity:
    """ConfigError for a listener whose protocol or mechanism this broker cannot speak as a client."""
    bound = [url.partition("://")[0].strip().upper() for url in str(config["listeners"]).split(",") if url.strip()]
    listener = str(config["inter.broker.listener.name"]).upper() or bound[0]
    protocol = protocol_map(config).get(listener, listener)
    context = _tls_context(config, listener) if protocol in ("SSL", "SASL_SSL") else None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(context)
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).strip().upper()
    if mechanism not in sasl.IMPLEMENTED:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: the brokers reach each other on "
                          f"{protocol} listener {listener}; implemented: {', '.join(sasl.IMPLEMENTED)}")
    text = config.for_listener(listener, "sasl.jaas.config", mechanism=mechanism)
    options = jaas.parse(text)[1] if text else {}
    if not options.get("username") or "password" not in options:
        raise ConfigError(f"the brokers log in to listener {listener} with {mechanism}: its sasl.jaas.config "
                          f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config) needs "
                          'username="..." password="..."')
    return ClientSecurity(context, mechanism, options["username"], options["password"])


def _tls_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    try:
        return _context(lambda name: config.for_listener(listener, name))
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the stores the brokers connect with: {exc}") from None


def _context(get: Callable[[str], object]) -> ssl.SSLContext:
    """A client's TLS context from Kafka's ssl.* names (PEM stores) or librdkafka's (ssl.ca.location,
    ssl.certificate.location, ssl.key.location)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if get("ssl.truststore.location") or get("ssl.ca.location"):
        context.load_verify_locations(cafile=get("ssl.truststore.location") or get("ssl.ca.location"))
    elif get("ssl.truststore.certificates"):
        context.load_verify_locations(cadata=tls.normalize_pem(get("ssl.truststore.certificates")))
    password = get("ssl.key.password") or None
    if get("ssl.keystore.location"):
        context.load_cert_chain(get("ssl.keystore.location"), password=password)
    elif get("ssl.keystore.key") and get("ssl.keystore.certificate.chain"):
        tls.load_cert_chain_text(context, get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"), password)
    elif get("ssl.certificate.location") and get("ssl.key.location"):
        context.load_cert_chain(get("ssl.certificate.location"), get("ssl.key.location"), password=password)
    return context


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def from_properties(properties: dict[str, str]) -> ClientSecurity:
    """A client's security from Kafka client properties (an admin tool's --command-config): security.protocol,
    sasl.mechanism, sasl.jaas.config (or librdkafka's sasl.username / sasl.password), ssl.truststore.location
    (or ssl.ca.location), ssl.keystore.* and ssl.endpoint.identification.algorithm ("" skips the host name
    check). Stores are PEM. ConfigError names the property that is wrong."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            context = _context(lambda name: properties.get(name, "").strip())
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(f"ssl.* properties: cannot load the trust or key store: {exc}") from None
        if properties.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
            context.check_hostname = False
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ClientSecurity(context)
    mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in sasl.IMPLEMENTED:
        raise ConfigError(f"sasl.mechanism={mechanism}: implemented: {', '.join(sasl.IMPLEMENTED)}")
    options = jaas.parse(properties["sasl.jaas.config"].strip())[1] if properties.get("sasl.jaas.config") else {}
    username = options.get("username", properties.get("sasl.username", ""))
    password = options.get("password", properties.get("sasl.password"))
    if not username or password is None:
        raise ConfigError(f"{protocol} with {mechanism} needs sasl.jaas.config with username=\"...\" "
                          'password="..." (or sasl.username and sasl.password)')
    return ClientSecurity(context, mechanism, username, password)
