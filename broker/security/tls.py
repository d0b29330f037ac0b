"""TLS for SSL and SASL_SSL listeners: Kafka's ssl.* settings to an ssl.SSLContext, and the principal
of a client certificate.

Only PEM stores exist here (ssl.keystore.type=PEM): a key store is a file with the private key and its
certificate chain (ssl.keystore.location), or the same two as PEM text (ssl.keystore.key,
ssl.keystore.certificate.chain); a trust store is a file or text of CA certificates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import ssl
import tempfile
from typing import Callable

from ..config.broker_config import BrokerConfig, ConfigError

log = logging.getLogger("moldau.server")

# a client that connects and then stalls the handshake holds a socket this long at most
HANDSHAKE_TIMEOUT_S = 10.0
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}

# RFC 2253 attribute names as Java's X500Principal.getName() writes them
_RDN_NAMES = {
    "commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
    "stateOrProvinceName": "ST", "localityName": "L", "streetAddress": "STREET", "domainComponent": "DC",
    "userId": "UID",
}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The listener's TLS context; ConfigError for anything missing, unreadable or unsupported."""
    def get(name):
        return config.for_listener(listener, name)

    for store in ("ssl.keystore.type", "ssl.truststore.type"):
        if get(store).upper() != "PEM":
            raise ConfigError(f"{store}={get(store)} is not supported (PEM only)")
    if get("ssl.principal.mapping.rules").strip() != "DEFAULT":
        raise ConfigError("ssl.principal.mapping.rules: only DEFAULT is supported")
    client_auth = get("ssl.client.auth").strip().lower()
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth={client_auth!r} is not one of none, requested, required")
    versions = [v.strip() for v in get("ssl.enabled.protocols").split(",") if v.strip()]
    if not versions or any(v not in PROTOCOLS for v in versions):
        raise ConfigError(f"ssl.enabled.protocols={','.join(versions)!r}: supported are {', '.join(PROTOCOLS)}")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = min(PROTOCOLS[v] for v in versions)
    context.maximum_version = max(PROTOCOLS[v] for v in versions)
    password = get("ssl.key.password") or None
    try:
        if get("ssl.keystore.location"):
            context.load_cert_chain(get("ssl.keystore.location"), password=password)
        elif get("ssl.keystore.key") and get("ssl.keystore.certificate.chain"):
            load_cert_chain_text(context, get("ssl.keystore.key"), get("ssl.keystore.certificate.chain"), password)
        else:
            raise ConfigError(f"listener {listener} needs ssl.keystore.location "
                              "(or ssl.keystore.key and ssl.keystore.certificate.chain)")
        if get("ssl.truststore.location"):
            context.load_verify_locations(cafile=get("ssl.truststore.location"))
        elif get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=normalize_pem(get("ssl.truststore.certificates")))
        elif client_auth != "none":
            raise ConfigError(f"ssl.client.auth={client_auth} on listener {listener} needs a trust store "
                              "(ssl.truststore.location or ssl.truststore.certificates)")
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"listener {listener}: cannot load its key or trust store: {exc}") from None
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def load_cert_chain_text(context: ssl.SSLContext, key: str, chain: str, password: str | None) -> None:
    # the ssl module loads key stores from files only; this one lives just long enough to be read
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(normalize_pem(key) + normalize_pem(chain))
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def normalize_pem(text: str) -> str:
    """PEM blocks rewrapped: a properties value may have lost its line breaks or spell them as \\n."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text.replace("\\n", "\n")):
        data = "".join(body.split())
        lines = "\n".join(data[i : i + 64] for i in range(0, len(data), 64))
        blocks.append(f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----\n")
    return "".join(blocks)


def principal_name(peercert: dict | None) -> str | None:
    """The certificate subject in RFC 2253 form (Kafka's DEFAULT mapping), most specific name first."""
    if not peercert or "subject" not in peercert:
        return None
    parts = []
    for rdn in reversed(peercert["subject"]):
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out


async def handshake(loop, client: socket.socket, address, context: ssl.SSLContext,
                    make_connection: Callable[[], asyncio.Protocol]) -> None:
    """Set up an accepted connection with its TLS handshake.

    Not create_server(ssl=...): its failed or timed-out handshakes vanish without a word. Here each one is
    logged with the client's address and closes that socket only."""
    try:
        await loop.connect_accepted_socket(make_connection, client, ssl=context,
                                           ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as exc:  # the client went away (a port probe)
        log.debug("TLS handshake with %s:%d ended by the client: %s", address[0], address[1], exc)
        client.close()
    except (OSError, ssl.SSLError) as exc:
        log.warning("TLS handshake with %s:%d failed: %s", address[0], address[1], str(exc) or type(exc).__name__)
        client.close()
