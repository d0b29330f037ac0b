"""A listener's key and trust stores replaced without a restart, as Kafka's dynamic broker configs do it.

`kafka-configs.sh --entity-type brokers --entity-name <node.id> --alter --add-config
listener.name.<listener>.ssl.keystore.location=<path>` (AlterConfigs or IncrementalAlterConfigs on the
BROKER resource) builds the listener's TLS context anew from its settings with the change, so setting
the same path again reloads a renewed file. New connections get the new context; open ones keep theirs.
A store that does not load is refused (INVALID_CONFIG) and the listener keeps the one it has. The change
lasts until the restart, which reads server.properties.
"""

from __future__ import annotations

import logging
import ssl

from ..config import LISTENER_PREFIX, ConfigError
from ..errors import ErrorCode
from . import tls

log = logging.getLogger("moldau.security")

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS that a PEM store has
RECONFIGURABLE = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.keystore.key",
                            "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
                            "ssl.truststore.certificates"})


class ListenerContexts:
    """Each TLS listener's current context, which its accept loop reads for every new connection."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.contexts: dict[str, ssl.SSLContext] = {}
        self.static = dict(broker.config.per_listener)  # server.properties: what a deleted change goes back to

    def alter(self, resource_name: str, changes: dict[str, str | None], validate_only: bool) -> tuple[int, str | None]:
        """Apply ``changes`` ({name: value, or None for server.properties' value}) to this broker's listeners."""
        node_id = self.broker.node_id
        if resource_name != str(node_id):
            return ErrorCode.INVALID_REQUEST, (f"TLS stores are set per broker: name the resource {node_id} "
                                               "(other broker configs are static: set them in server.properties)")
        listeners, normalized = set(), {}
        for key, value in changes.items():
            listener, _, name = key[len(LISTENER_PREFIX):].partition(".") if key.startswith(LISTENER_PREFIX) \
                else ("", "", key)
            if name not in RECONFIGURABLE or not listener:
                return ErrorCode.INVALID_REQUEST, (f"{key} cannot be changed without a restart (these can: "
                                                   f"{LISTENER_PREFIX}<listener>.ssl.keystore.* and .ssl.truststore.*)")
            if listener.upper() not in self.contexts:
                return ErrorCode.INVALID_CONFIG, f"{key}: there is no SSL or SASL_SSL listener {listener.upper()}"
            listeners.add(listener.upper())
            normalized[f"{LISTENER_PREFIX}{listener.lower()}.{name}"] = value
        changes = normalized
        per_listener = self.broker.config.per_listener
        saved = dict(per_listener)
        for key, value in changes.items():  # tried on the config itself; put back unless every store loads
            per_listener.pop(key, None)
            if value is not None or key in self.static:
                per_listener[key] = value if value is not None else self.static[key]
        try:
            contexts = {listener: tls.server_context(self.broker.config, listener) for listener in listeners}
        except ConfigError as exc:
            contexts = None
            problem = str(exc)
        if contexts is None or validate_only:
            per_listener.clear()
            per_listener.update(saved)
            if contexts is None:
                return ErrorCode.INVALID_CONFIG, problem
        else:
            self.contexts.update(contexts)
            log.info("TLS key and trust stores reloaded: %s", ", ".join(sorted(changes)))
        return ErrorCode.NONE, None
