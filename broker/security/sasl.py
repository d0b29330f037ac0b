"""SASL authentication on SASL_PLAINTEXT and SASL_SSL listeners (Kafka's SaslServerAuthenticator).

A connection on such a listener may send only ApiVersions, SaslHandshake and SaslAuthenticate until it
has authenticated. SaslHandshake picks one of the listener's sasl.enabled.mechanisms; SaslAuthenticate
carries the mechanism's messages: one for PLAIN (users and passwords from the listener's
PlainLoginModule sasl.jaas.config), two for SCRAM-SHA-256/512 (credentials managed with
AlterUserScramCredentials, checked by the scramp library).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

import scramp

from ..config import BrokerConfig, ConfigError
from . import jaas
from .scram_credentials import MECHANISMS as SCRAM_MECHANISMS
from .scram_credentials import ScramCredentials

IMPLEMENTED = ("PLAIN", *SCRAM_MECHANISMS)
# all a connection may send before it has authenticated; anything else closes it
BEFORE_AUTHENTICATION = frozenset({"ApiVersions", "SaslHandshake", "SaslAuthenticate"})


class AuthenticationFailed(Exception):
    """The client's credentials are wrong; the message goes to the client and the log, never a secret."""


@dataclass(frozen=True)
class SaslSettings:
    """One listener's SASL configuration."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


def listener_settings(config: BrokerConfig, listener: str) -> SaslSettings:
    """sasl.enabled.mechanisms and, for PLAIN, the users of the listener's sasl.jaas.config
    (listener.name.<listener>.plain.sasl.jaas.config, listener.name.<listener>.sasl.jaas.config or
    sasl.jaas.config); ConfigError for what this broker cannot serve."""
    mechanisms = tuple(m.strip().upper() for m in
                       str(config.for_listener(listener, "sasl.enabled.mechanisms")).split(",") if m.strip())
    if not mechanisms:
        raise ConfigError(f"sasl.enabled.mechanisms of listener {listener} is empty")
    for mechanism in mechanisms:
        if mechanism not in IMPLEMENTED:
            raise ConfigError(f"sasl.enabled.mechanisms of listener {listener}: {mechanism} is not implemented "
                              f"(implemented: {', '.join(IMPLEMENTED)})")
    users = {}
    if "PLAIN" in mechanisms:
        text = config.for_listener(listener, "sasl.jaas.config", mechanism="PLAIN")
        users = jaas.plain_users(text) if text else {}
        if not users:
            raise ConfigError(f"PLAIN on listener {listener} needs users: "
                              f"listener.name.{listener.lower()}.plain.sasl.jaas.config="
                              f'{jaas.PLAIN_LOGIN_MODULE} required user_<name>="<password>" ...;')
    return SaslSettings(mechanisms, users)


class SaslServer:
    """One connection's authentication: handshake, then the mechanism's exchange."""

    def __init__(self, settings: SaslSettings, credentials: ScramCredentials):
        self.settings = settings
        self.credentials = credentials
        self.mechanism: str | None = None
        self.user: str | None = None  # known once the client has named itself
        self._scram: scramp.ScramServer | None = None

    def handshake(self, mechanism: str) -> bool:
        """True if the listener offers ``mechanism``; the authentication that follows uses it."""
        if mechanism not in self.settings.mechanisms:
            return False
        self.mechanism = mechanism
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """The answer to one client message and whether authentication is complete; AuthenticationFailed."""
        if self.mechanism == "PLAIN":
            return self._plain(token), True
        return self._scram_step(token)

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid PLAIN message")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        self.user = user
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: client requested an authorization id that is "
                                       "different from username")
        expected = self.settings.plain_users.get(user)
        # compared in constant time; an unknown user costs the same as a wrong password
        if not hmac.compare_digest((expected or "\0").encode(), password.encode()) or expected is None:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        return b""

    def _scram_step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            if self._scram is None:
                self._scram = scramp.ScramMechanism(self.mechanism).make_server(self._scram_credential)
                self._scram.set_client_first(token.decode("utf-8"))
                return self._scram.get_server_first().encode(), False
            self._scram.set_client_final(token.decode("utf-8"))
            return self._scram.get_server_final().encode(), True
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as exc:
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid "
                                       f"credentials with SASL mechanism {self.mechanism}") from exc

    def _scram_credential(self, user: str):
        self.user = user
        credential = self.credentials.get(user, self.mechanism)
        if credential is None:
            raise AuthenticationFailed(f"Authentication failed: Invalid user credentials")
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
