"""Who sent a request: the listener it came in on and the authenticated principal (Kafka's Session)."""

from __future__ import annotations

from ..security.sasl import SaslServer
from .listeners import Listener

ANONYMOUS = "User:ANONYMOUS"


class Session:
    __slots__ = ("listener", "principal", "host", "peer", "sasl", "authenticated", "close_reason", "completed_sasl",
                 "reauth_supported", "expires_at")

    def __init__(self, listener: Listener, host: str, peer: str, sasl: SaslServer | None = None):
        self.listener = listener
        self.host = host  # the client's IP address, as ACLs match it
        self.peer = peer  # host:port, for log lines
        self.principal = ANONYMOUS  # "User:<name>", Kafka's KafkaPrincipal as text
        self.sasl = sasl  # a SASL listener's authentication (or re-authentication) under way
        self.authenticated = sasl is None
        self.close_reason: str | None = None  # set by a SASL handler whose answer ends the connection
        self.completed_sasl: SaslServer | None = None  # the last authentication, which a re-authentication renews
        self.reauth_supported = False  # the client sent SaslAuthenticate v1+ (KIP-368)
        self.expires_at: float | None = None  # time.monotonic() when the SASL session ends (connections.max.reauth.ms)
