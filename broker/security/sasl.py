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

from ..config.broker_config import BrokerConfig, ConfigError
from . import jaas
from .scram_credentials import MECHANISMS as SCRAM_MECHANISMS
from .scram_credentials import ScramCredentials

IMPLEMENTED = ("PLAIN", *SCRAM_MECHANISMS)
# all a connection may send before it has authenticated; anything else closes it


class AuthenticationFailed(Exception):
    """The client's credentials are wrong; the message goes to the client and the log, never a secret."""


@dataclass(frozen=True)
class SaslSettings:
    """One listener's SASL configuration."""

    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    max_reauth_ms: dict[str, int] = field(default_factory=dict, compare=False)  # by mechanism; 0: no expiry


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
    reauth = {m: int(config.for_listener(listener, "connections.max.reauth.ms", mechanism=m)) for m in mechanisms}
    if any(ms < 0 for ms in reauth.values()):
        raise ConfigError(f"connections.max.reauth.ms of listener {listener} must not be negative")
    return SaslSettings(mechanisms, users, reauth)


class SaslServer:
    """One connection's authentication: handshake, then the mechanism's exchange; again for each
    re-authentication (KIP-368), which must keep the mechanism and the user."""

    def __init__(self, settings: SaslSettings, credentials: ScramCredentials, previous: SaslServer | None = None):
        self.settings = settings
        self.credentials = credentials
        self.previous = previous  # the completed authentication this one renews
        self.mechanism: str | None = None
        self.user: str | None = None  # known once the client has named itself
        self._scram: scramp.ScramServer | None = None

    def renewal(self) -> SaslServer:
        return SaslServer(self.settings, self.credentials, previous=self)

    @property
    def session_lifetime_ms(self) -> int:
        return self.settings.max_reauth_ms.get(self.mechanism, 0)

    def handshake(self, mechanism: str) -> bool:
        """True if the listener offers ``mechanism``; the authentication that follows uses it."""
        if mechanism not in self.settings.mechanisms:
            return False
        self.mechanism = mechanism
        return True

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """The answer to one client message and whether authentication is complete; AuthenticationFailed."""
        if self.previous is not None and self.mechanism != self.previous.mechanism:
            raise AuthenticationFailed(f"SASL mechanism '{self.mechanism}' requested by client is not supported "
                                       f"for re-authentication of mechanism '{self.previous.mechanism}'")
        answer, done = (self._plain(token), True) if self.mechanism == "PLAIN" else self._scram_step(token)
        if done and self.previous is not None and self.user != self.previous.user:
            raise AuthenticationFailed(f"Cannot change principals during re-authentication from "
                                       f"User:{self.previous.user}: User:{self.user}")
        return answer, done

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
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
