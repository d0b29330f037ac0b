"""A listener's key and trust stores replaced without a restart, as Kafka's dynamic broker configs do it.

`kafka-configs.sh --entity-type brokers --entity-name <node.id> --alter --add-config
listener.name.<listener>.ssl.keystore.location=<path>` (AlterConfigs or IncrementalAlterConfigs on the
BROKER resource) builds the listener's TLS context anew from its settings with the change, so setting
the same path again reloads a renewed file. New connections get the new context; open ones keep theirs.
A store that does not load is refused (INVALID_CONFIG) and the listener keeps the one it has.

Kafka keeps dynamic broker configs in its metadata; here a change is written to
`<log dir>/dynamic-broker-configs.json` (mode 0600: an inline `ssl.keystore.key` is a private key) before
the answer, and applied over server.properties' values at the next start. One that no longer loads then
is logged and left out: the listener starts with server.properties' stores.
"""

from __future__ import annotations

import json
import logging
import ssl

from storage.files import atomic_write

from ..config.broker_config import LISTENER_PREFIX, ConfigError
from ..errors import ErrorCode
from . import tls

log = logging.getLogger("moldau.security")

# Kafka's SslConfigs.RECONFIGURABLE_CONFIGS that a PEM store has
RECONFIGURABLE = frozenset({"ssl.keystore.type", "ssl.keystore.location", "ssl.key.password", "ssl.keystore.key",
                            "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
                            "ssl.truststore.certificates"})
DYNAMIC_CONFIGS_FILE = "dynamic-broker-configs.json"


class ListenerContexts:
    """Each TLS listener's current context, which its accept loop reads for every new connection."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.contexts: dict[str, ssl.SSLContext] = {}
        self.static = dict(broker.config.per_listener)  # server.properties: what a deleted change goes back to
        self.path = broker.config.log_dir / DYNAMIC_CONFIGS_FILE
        self.dynamic: dict[str, str] = {}  # the changes in force, as the file holds them

    def restore(self) -> None:
        """Apply the changes stored by an earlier run, together, as they loaded then (once the listeners'
        contexts are registered). If they no longer load the listeners keep server.properties' stores."""
        try:
            stored = json.loads(self.path.read_text()) if self.path.exists() else {}
            if not isinstance(stored, dict) or not all(isinstance(v, str) for v in stored.values()):
                raise ValueError("not an object of strings")
        except (OSError, ValueError) as exc:
            log.error("dynamic broker configs in %s not read (%s): the listeners use server.properties'",
                      self.path, exc)
            return
        if stored:
            code, problem = self.alter(str(self.broker.node_id), stored, validate_only=False, persist=False)
            if code:
                log.error("dynamic broker configs in %s not applied (%s): the listeners use server.properties'",
                          self.path, problem)

    def alter(self, resource_name: str, changes: dict[str, str | None], validate_only: bool,
              persist: bool = True) -> tuple[int, str | None]:
        """Apply ``changes`` ({name: value, or None for server.properties' value}) to this broker's listeners,
        and (``persist``) store them for the next start before answering."""
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
        dynamic = {key: value for key, value in {**self.dynamic, **changes}.items() if value is not None}
        error = ErrorCode.INVALID_CONFIG
        if contexts is not None and not validate_only and persist:
            try:
                atomic_write(self.path, json.dumps(dynamic, indent=1, sort_keys=True).encode(), mode=0o600)
            except OSError as exc:
                contexts, error, problem = None, ErrorCode.UNKNOWN_SERVER_ERROR, f"not stored in {self.path}: {exc}"
                log.error("TLS store change %s", problem)
        if contexts is None or validate_only:
            per_listener.clear()
            per_listener.update(saved)
            if contexts is None:
                return error, problem
        else:
            self.dynamic = dynamic
            self.contexts.update(contexts)
            log.info("TLS key and trust stores reloaded: %s", ", ".join(sorted(changes)))
        return ErrorCode.NONE, None
