"""How this broker connects to the others: as a client of inter.broker.listener.name (default: the first
listener), with that listener's security protocol, as Kafka's brokers do.

SSL / SASL_SSL: the listener's trust store checks the other broker's certificate and its host name (Kafka's
default ssl.endpoint.identification.algorithm=https); its key store is the client certificate (mutual TLS).
SASL_PLAINTEXT / SASL_SSL: sasl.mechanism.inter.broker.protocol (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)
with the username and password options of the listener's JAAS config for it, e.g.
`listener.name.internal.plain.sasl.jaas.config=...PlainLoginModule required username="broker"
password="..." user_broker="...";`. The principal needs ClusterAction on the cluster (or super.users).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Awaitable, Callable

import scramp

from broker.config import BrokerConfig, ConfigError
from broker.errors import ErrorCode
from broker.listeners import protocol_map
from broker.security import jaas, sasl, tls

Exchange = Callable[[str, int, dict], Awaitable[dict]]  # one request on the new connection -> its response


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.ssl_context is None:
            return await asyncio.open_connection(host, port)
        return await asyncio.open_connection(host, port, ssl=self.ssl_context, server_hostname=host)

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
    def get(name):
        return config.for_listener(listener, name)

    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if get("ssl.truststore.location"):
            context.load_verify_locations(cafile=get("ssl.truststore.location"))
        elif get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=tls.normalize_pem(get("ssl.truststore.certificates")))
        password = get("ssl.key.password") or None
        if get("ssl.keystore.location"):
            context.load_cert_chain(get("ssl.keystore.location"), password=password)
        elif get("ssl.keystore.key") and get("ssl.keystore.certificate.chain"):
            tls.load_cert_chain_text(context, get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"), password)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the stores the brokers connect with: {exc}") from None
    return context
