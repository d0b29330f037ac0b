"""Who sent a request: the listener it came in on and the authenticated principal (Kafka's Session)."""

from __future__ import annotations

from .listeners import Listener
from .security.sasl import SaslServer

ANONYMOUS = "User:ANONYMOUS"


class Session:
    __slots__ = ("listener", "principal", "host", "peer", "sasl", "authenticated", "close_reason")

    def __init__(self, listener: Listener, host: str, peer: str, sasl: SaslServer | None = None):
        self.listener = listener
        self.host = host  # the client's IP address, as ACLs match it
        self.peer = peer  # host:port, for log lines
        self.principal = ANONYMOUS  # "User:<name>", Kafka's KafkaPrincipal as text
        self.sasl = sasl  # a SASL listener's authentication, until it is complete
        self.authenticated = sasl is None
        self.close_reason: str | None = None  # set by a SASL handler whose answer ends the connection
