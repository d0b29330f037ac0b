"""Who sent a request: the listener it came in on and the authenticated principal (Kafka's Session)."""

from __future__ import annotations

from .listeners import Listener

ANONYMOUS = "User:ANONYMOUS"


class Session:
    __slots__ = ("listener", "principal", "host")

    def __init__(self, listener: Listener, host: str, principal: str = ANONYMOUS):
        self.listener = listener
        self.host = host  # the client's IP address, as ACLs match it
        self.principal = principal  # "User:<name>", Kafka's KafkaPrincipal as text
