"""Client quotas as Kafka has them: the values (AlterClientQuotas / DescribeClientQuotas, kept by the
metadata store: ``client-quotas.json`` standalone, etcd in a cluster), the rates each client is measured at, and the throttle time a client over
its quota is given (it gets its answer at once, with ``throttle_time_ms``, and its connection is
not read again until that time has passed -- KIP-219).

``producer_ids_rate`` (KIP-936, proposed for Kafka and not in its releases yet): new producer ids a
second a user's Produce requests may bring to this broker, a bound on the idempotent producer state a
principal can make the partitions keep. A producer id counts once while the user used it within the
quota windows; past the rate, a batch with an id new to the user is refused with
THROTTLING_QUOTA_EXCEEDED (which clients retry) and the answer is throttled.

Entities are ``user`` (the connection's principal; ANONYMOUS without authentication), ``client-id``
and their pair, a name of None meaning the default for all; a request is held to the most specific
quota that matches it, in Kafka's order. Rates are measured per (user, client-id) over
``quota.window.num`` windows of ``quota.window.size.seconds``.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path

from protocol.codec import Encoded
from storage import clock
from storage.files import atomic_write

log = logging.getLogger("moldau.quotas")

QUOTAS_FILE = "client-quotas.json"
USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
PRODUCER_IDS_RATE = "producer_ids_rate"
KEYS_BY_ENTITY = {
    (USER,): {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE, PRODUCER_IDS_RATE},
    (CLIENT_ID,): {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE},
    (CLIENT_ID, USER): {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE},
    (IP,): {CONNECTION_CREATION_RATE},
}
ANONYMOUS = "ANONYMOUS"

Entity = tuple[tuple[str, str | None], ...]  # ((type, name or None for the default), ...) sorted by type


class QuotaError(ValueError):
    pass


def entity_of(components: list[dict]) -> Entity:
    """An AlterClientQuotas entity, checked as Kafka checks it (QuotaError: INVALID_REQUEST)."""
    entity = tuple(sorted((c["entity_type"], c["entity_name"]) for c in components))
    types = tuple(t for t, _ in entity)
    if types not in KEYS_BY_ENTITY:
        raise QuotaError(f"invalid quota entity {types}: user, client-id, both, or ip")
    return entity


def altered(entity: Entity, ops: list[dict], values: dict[str, float]) -> dict[str, float]:
    """An entity's quota values after AlterClientQuotas' set/remove operations; QuotaError for a key or
    value Kafka refuses."""
    allowed = KEYS_BY_ENTITY[tuple(t for t, _ in entity)]
    values = dict(values)
    for op in ops:
        key = op["key"]
        if key not in allowed:
            raise QuotaError(f"{key} is not a quota of {'/'.join(t for t, _ in entity)}")
        if op["remove"]:
            values.pop(key, None)
        elif not op["value"] > 0:
            raise QuotaError(f"{key} must be positive, got {op['value']}")
        else:
            values[key] = float(op["value"])
    return values


def _lookup_order(user: str, client_id: str) -> list[Entity]:
    """Kafka's precedence, most specific first (the default quota callback)."""
    return [
        ((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)), ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)), ((USER, None),),
        ((CLIENT_ID, client_id),), ((CLIENT_ID, None),),
    ]


class _Rate:
    """A sum over the last ``windows`` windows of ``size_s`` seconds, as a rate per second."""

    def __init__(self, windows: int, size_s: float) -> None:
        self.windows, self.size_s = windows, size_s
        self.samples: deque[list] = deque()  # [window start, amount]

    def record(self, amount: float, now: float) -> None:
        start = now - now % self.size_s
        if not self.samples or self.samples[-1][0] != start:
            self.samples.append([start, 0.0])
        self.samples[-1][1] += amount
        while self.samples[0][0] <= now - self.windows * self.size_s:
            self.samples.popleft()

    def rate(self, now: float) -> float:
        total = sum(amount for start, amount in self.samples if start > now - self.windows * self.size_s)
        # like Kafka, over the elapsed windows, never less than all but one of them
        elapsed = max(now - self.samples[0][0], (self.windows - 1) * self.size_s) if self.samples else 1.0
        return total / elapsed


class ClientQuotas:
    def __init__(self, log_dir: Path, windows: int = 11, window_size_s: float = 1.0) -> None:
        self.path = Path(log_dir) / QUOTAS_FILE
        self.windows, self.window_size_s = windows, window_size_s
        self.values: dict[Entity, dict[str, float]] = {}
        self._rates: dict[tuple[str, str, str], _Rate] = {}
        self._producer_ids: dict[str, dict[int, float]] = {}  # user -> producer id -> last used, oldest first
        if self.path.exists():
            for item in json.loads(self.path.read_text()):
                self.values[tuple((t, n) for t, n in item["entity"])] = dict(item["values"])

    # --- the values ----------------------------------------------------------

    def set(self, entity: Entity, values: dict[str, float]) -> None:
        """An entity's quota values as they are now (none: the entity has no quota)."""
        if values:
            self.values[entity] = dict(values)
        else:
            self.values.pop(entity, None)

    def save(self) -> None:
        atomic_write(self.path, json.dumps(
            [{"entity": list(map(list, e)), "values": v} for e, v in self.values.items()], indent=1).encode())

    def quota(self, key: str, user: str, client_id: str) -> float | None:
        for entity in _lookup_order(user, client_id):
            value = self.values.get(entity, {}).get(key)
            if value is not None:
                return value
        return None

    # --- measuring -------------------------------------------------------------

    def record(self, key: str, user: str, client_id: str, amount: float, now: float | None = None) -> int:
        """Count ``amount`` against the client's ``key`` quota; the throttle time in ms (0: within it)."""
        return self._measure((key, user, client_id), self.quota(key, user, client_id), amount, now)

    def record_connection(self, ip: str, now: float | None = None) -> int:
        """A new connection from ``ip`` against its connection_creation_rate (KIP-612); the throttle ms."""
        bound = next((value for entity in (((IP, ip),), ((IP, None),))
                      if (value := self.values.get(entity, {}).get(CONNECTION_CREATION_RATE)) is not None), None)
        return self._measure((CONNECTION_CREATION_RATE, ip, ""), bound, 1, now)

    def admit_producer_id(self, user: str, producer_id: int, now: float | None = None) -> int:
        """KIP-936: 0 if ``user`` may write with ``producer_id`` (one it used within the quota windows, or a
        new one within its producer_ids_rate), else the throttle time in ms."""
        if not any(PRODUCER_IDS_RATE in self.values.get(entity, ()) for entity in (((USER, user),), ((USER, None),))):
            return 0
        now = clock.monotonic() if now is None else now
        seen = self._producer_ids.setdefault(user, {})
        while seen and next(iter(seen.values())) <= now - self.windows * self.window_size_s:
            del seen[next(iter(seen))]  # unused for longer than the windows: counts as new again
        if seen.pop(producer_id, None) is None:
            over = self.exceeded(PRODUCER_IDS_RATE, user, "", now)
            if over:
                return over
            self.record(PRODUCER_IDS_RATE, user, "", 1, now)
        seen[producer_id] = now
        return 0

    def _measure(self, sensor: tuple[str, str, str], bound: float | None, amount: float, now: float | None) -> int:
        if bound is None:
            return 0
        now = clock.monotonic() if now is None else now
        rate = self._rates.setdefault(sensor, _Rate(self.windows, self.window_size_s))
        rate.record(amount, now)
        return self._throttle_ms(rate.rate(now), bound)

    def exceeded(self, key: str, user: str, client_id: str, now: float | None = None) -> int:
        """Throttle time in ms if the client is over its ``key`` quota already (KIP-599's strict check)."""
        bound = self.quota(key, user, client_id)
        rate = self._rates.get((key, user, client_id))
        if bound is None or rate is None:
            return 0
        return self._throttle_ms(rate.rate(clock.monotonic() if now is None else now), bound)

    def _throttle_ms(self, rate: float, bound: float) -> int:
        if rate <= bound:
            return 0
        window_ms = self.windows * self.window_size_s * 1000
        return int(min((rate - bound) / bound * window_ms, window_ms))


def user_of(session) -> str:
    """The quota user of a connection: its principal's name (ANONYMOUS without authentication)."""
    principal = getattr(session, "principal", None) or ""
    return principal.split(":", 1)[1] if principal.startswith("User:") else ANONYMOUS


def _fetched_bytes(result: dict) -> int:
    # (an Encoded answer holds no records: protocol/fetch_answers.py)
    return sum(len(p["records"] or b"") for t in result["responses"] for p in t["partitions"]
               if p.__class__ is not Encoded)


def client_quota_throttle(quotas: ClientQuotas, api: str, header, result: dict | None,
                          request_bytes: int, handled_s: float) -> int:
    """Record one request against its client's quotas; the longest throttle time they give (ms)."""
    if not quotas.values:
        return 0
    user, client_id = user_of(header.session), header.client_id or ""
    throttle = quotas.record(REQUEST_PERCENTAGE, user, client_id, handled_s * 100)
    if api == "Produce":
        throttle = max(throttle, quotas.record(PRODUCER_BYTE_RATE, user, client_id, request_bytes))
    elif api == "Fetch" and result is not None:
        throttle = max(throttle, quotas.record(CONSUMER_BYTE_RATE, user, client_id, _fetched_bytes(result)))
    return throttle


QUOTA_EXCEEDED = "The throttling quota has been exceeded."


class ProducerIds:
    """One Produce request's producer ids against its user's producer_ids_rate (KIP-936)."""

    def __init__(self, quotas: ClientQuotas, header) -> None:
        self.quotas, self.user = quotas, user_of(header.session)
        self.throttle_ms = 0

    def admit(self, producer_id: int) -> bool:
        throttle = self.quotas.admit_producer_id(self.user, producer_id)
        self.throttle_ms = max(self.throttle_ms, throttle)
        return throttle == 0


class ControllerMutations:
    """KIP-599's controller_mutation_rate for one request: partitions created or deleted count against
    the client's quota. Strict (the request versions that know THROTTLING_QUOTA_EXCEEDED): a topic is
    refused while the client is over its quota. Otherwise the mutation goes ahead and the answer is
    throttled."""

    def __init__(self, quotas: ClientQuotas, header, strict: bool) -> None:
        self.quotas, self.strict = quotas, strict
        self.user, self.client_id = user_of(header.session), header.client_id or ""
        self.throttle_ms = 0

    def refused(self) -> bool:
        over = self.quotas.exceeded(CONTROLLER_MUTATION_RATE, self.user, self.client_id) if self.strict else 0
        self.throttle_ms = max(self.throttle_ms, over)
        return over > 0

    def record(self, partitions: int) -> None:
        throttle = self.quotas.record(CONTROLLER_MUTATION_RATE, self.user, self.client_id, partitions)
        self.throttle_ms = max(self.throttle_ms, throttle)
