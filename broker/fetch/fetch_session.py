"""Incremental fetch sessions (KIP-227), in the shapes of Kafka's FetchSession and FetchSessionCache.

A FULL fetch (epoch 0) names every partition and, if the cache has room,
opens a session: the broker remembers the partitions, their fetch offsets and
what it last told the client. INCREMENTAL fetches (the session's id and next
epoch) name only partitions that changed or are forgotten, and their
responses list only partitions with news: records, a moved high watermark or
log start offset, an error. Epoch -1 (FINAL) closes a session; a FULL fetch
naming a session closes it and starts anew. Who fetches (a consumer or,
later, a replica) does not matter to the cache beyond the ``privileged`` flag
Kafka gives followers.

Kafka reads every partition of a session on every fetch. Here a client's
session looks only at the partitions that may have news: those the request
names, those whose log told the session it changed (``Log.watchers``: an
append, a moved high watermark or log start, a truncation, a new leadership
state, the log deleted), and those whose last answer was not final (an error,
records the client has not moved past yet); of those it reads the ones whose
client is not at the end it was told. The others are answered by omission,
as Kafka's would be, so an incremental fetch costs what its news costs, not
the session's size. A follower's session works the same way: a partition it
has caught up in and that has not changed since is not looked at again, and
the leader counts each fetch of the session as a fetch of it
(``fetch_ms``: the follower stays caught up there without a per-partition
update; replica_manager.py's FollowerState.settled_in).

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions. A new
one takes the slot of a session unused for two minutes, or else of the least
valuable session older than two minutes (fewest partitions; clients' before
followers') if the new one is worth at least as much; followers may also
evict clients' sessions of any age. Otherwise the client is answered
sessionless (session id 0) and keeps sending full fetches.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from collections.abc import Mapping, Set
from dataclasses import dataclass
from functools import partial

from storage import clock
from storage.log import Log
from storage.log_manager import LogManager

from ..errors import ErrorCode
from .log_read import FOLLOWER, FetchPartition, PartitionData, TopicPartition, partition_log

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: what the client asked for last, and what it was last told."""

    request: FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1
    order: int = 0  # reads go in this order: a partition that returned records goes to the back

    def must_respond(self, data: PartitionData) -> bool:
        """Whether an incremental response lists this partition; remembers what it tells (Kafka's
        maybeUpdateResponseData)."""
        respond = bool(data.records)
        if self.high_watermark != data.high_watermark:
            respond = True
            self.high_watermark = data.high_watermark
        if self.log_start_offset != data.log_start_offset:
            respond = True
            self.log_start_offset = data.log_start_offset
        if data.error:
            self.high_watermark = -1  # re-sent once the error is gone
            respond = True
        if data.diverging_epoch is not None:  # a follower's truncation point
            respond = True
        return respond

    def settled(self, data: PartitionData) -> bool:
        """Nothing more to tell until the log changes: no error, no records, the client at the high
        watermark it was told (a read_committed client held below it by an open transaction is read
        again each time, as before)."""
        return (not data.error and not data.records and data.diverging_epoch is None
                and self.request.fetch_offset == data.high_watermark)


class FetchSession:
    def __init__(self, session_id: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition],
                 uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        # a follower's session: when its latest and the fetch before began (monotonic ms, as the ISR checks)
        self.fetch_ms = self.previous_fetch_ms = clock.monotonic_ms()
        self.epoch = next_epoch(INITIAL_EPOCH)
        self._order = 0
        for cached in partitions.values():
            cached.order = self._next_order()
        # a client's session: the partitions to read at the next fetch, and the logs that tell it of changes
        self.changed: set[TopicPartition] = set(partitions)
        self._watched: dict[TopicPartition, Log] = {}
        # the partitions of each topic, kept as they come and go: a client may forget and add partitions on
        # every fetch (the Java client does, for those whose records it still buffers)
        self._topics = Counter(key.topic for key in partitions)

    def _next_order(self) -> int:
        self._order += 1
        return self._order

    def update(self, wanted: dict[TopicPartition, FetchPartition], forgotten: list[TopicPartition]) -> None:
        """An incremental request's changes: new partitions, new fetch positions, forgotten partitions."""
        for key, want in wanted.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(want, order=self._next_order())
                self._topics[key.topic] += 1
            else:
                cached.request = want
            self.changed.add(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                self._topics[key.topic] -= 1
                if not self._topics[key.topic]:
                    del self._topics[key.topic]
                self.changed.discard(key)
                self.watch(key, None)

    def topics(self) -> Set:
        """The topics of the session's partitions (as its requests name them)."""
        return self._topics.keys()

    def watch(self, key: TopicPartition, log_: Log | None) -> None:
        """Be told when ``log_`` (the partition's log now, None if there is none) changes."""
        old = self._watched.get(key)
        if old is log_:
            return
        if old is not None:
            old.watchers.pop(self, None)
            del self._watched[key]
        if log_ is not None:
            log_.watchers[self] = partial(self.changed.add, key)
            self._watched[key] = log_

    def close(self) -> None:
        for log_ in self._watched.values():
            log_.watchers.pop(self, None)
        self._watched.clear()

    def answered(self, key: TopicPartition, cached: CachedPartition, data: PartitionData) -> None:
        """After a response: a partition that returned records goes to the back (the others get the next
        response's max_bytes first); one that settled is read again only when its log changes."""
        if data.records:
            cached.order = self._next_order()
            del self.partitions[key]
            self.partitions[key] = cached
        if cached.settled(data) and not self.privileged:  # a follower's settles in to_read (its log end)
            self.changed.discard(key)
        else:
            self.changed.add(key)

    def eviction_key(self) -> tuple[bool, int, int]:
        """Less is evicted first (Kafka's EvictableKey)."""
        return self.privileged, len(self.partitions), self.id


class FetchSessionCache:
    def __init__(self, max_entries: int, eviction_ms: int = EVICTION_MS) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._random = random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session.id)

    def maybe_create(self, now_ms: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition],
                     uses_topic_ids: bool) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no slot for it."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, partitions, uses_topic_ids, now_ms)
        self._sessions[session.id] = session
        return session.id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:  # stale
            self.remove(oldest.id)
            return True
        candidates = [s for s in self._sessions.values()
                      if now_ms - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.eviction_key)
        if (privileged, size, 0) < victim.eviction_key():
            return False
        self.remove(victim.id)
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._random.randint(1, 0x7FFFFFFF)
            if session_id not in self._sessions:
                return session_id


class SessionRequests(Mapping):
    """A session's partitions as a fetch's requests, without copying them on every fetch."""

    def __init__(self, partitions: dict[TopicPartition, CachedPartition]) -> None:
        self._partitions = partitions

    def __getitem__(self, key: TopicPartition) -> FetchPartition:
        return self._partitions[key].request

    def __iter__(self):
        return iter(self._partitions)

    def __len__(self) -> int:
        return len(self._partitions)


class FetchContext:
    """What one Fetch reads and how its response is shaped (Kafka's Full/Incremental/Sessionless/SessionError
    fetch contexts)."""

    def __init__(self, partitions: Mapping[TopicPartition, FetchPartition], error: int = ErrorCode.NONE,
                 session: FetchSession | None = None, create_in: FetchSessionCache | None = None,
                 privileged: bool = False, uses_topic_ids: bool = False) -> None:
        self.partitions = partitions  # the fetch's partitions, in order (all of a session's)
        self.error = error
        self._session = session  # incremental
        self._cache = create_in  # full: open a session with the response
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    @property
    def session(self) -> FetchSession | None:
        """The incremental session this fetch belongs to."""
        return self._session

    @property
    def topics(self) -> Set:
        """The topics of the fetch's partitions (as the request names them)."""
        if self._session is not None:
            return self._session.topics()
        return {key.topic for key in self.partitions}

    def candidates(self) -> Mapping[TopicPartition, FetchPartition]:
        """The partitions that may need an answer: all but those of a client's session that settled and
        whose logs have not changed since, in the session's order."""
        session = self._session
        if session is None:
            return self.partitions
        cached = session.partitions
        keys = sorted(session.changed, key=lambda key: cached[key].order)
        return {key: cached[key].request for key in keys}

    def to_read(self, logs: LogManager, isolation: int, answered: dict[TopicPartition, PartitionData],
                candidates: Mapping[TopicPartition, FetchPartition]) -> dict[TopicPartition, FetchPartition]:
        """The ``candidates`` to read now. An incremental fetch leaves out those it need not list: the client's
        position at the high watermark it was last told and at the end it may read to (a follower reads past
        the high watermark), that and the log start unchanged, and not ``answered`` otherwise (an error, a
        diverging epoch). A partition the request names is left out too when that holds: a client names the
        partitions it moved on in, and one that moved to the end it was told would read nothing. Kafka reads
        them all; in Python skipping them is most of what a session saves."""
        session = self._session
        if session is None:
            return candidates
        read = {}
        for key, want in candidates.items():
            cached = session.partitions[key]
            log_ = partition_log(logs, key, want.topic_name)
            session.watch(key, log_)
            if key not in answered and want.fetch_offset == cached.high_watermark:
                # a consumer's end (high watermark, or the last stable offset below it) is then reached
                if (log_ is not None and log_.high_watermark == cached.high_watermark
                        and log_.log_start_offset == cached.log_start_offset
                        and (isolation != FOLLOWER or log_.log_end_offset <= want.fetch_offset)):
                    session.changed.discard(key)
                    continue
            read[key] = want
        return read

    def respond(self, found: dict[TopicPartition, PartitionData], now_ms: int, logs: LogManager) -> tuple[int, dict]:
        """(the response's session id, the partitions it lists)."""
        session = self._session
        if session is not None:
            listed = {}
            for key, data in found.items():
                cached = session.partitions[key]
                if cached.must_respond(data):
                    listed[key] = data
                session.answered(key, cached, data)
            return session.id, listed
        if self._cache is not None:
            cached = {key: CachedPartition(self.partitions[key], data.high_watermark, data.log_start_offset)
                      for key, data in found.items()}
            session_id = self._cache.maybe_create(now_ms, self._privileged, cached, self._uses_topic_ids)
            session = self._cache.get(session_id)
            if session is not None:
                # a follower's partitions are all looked at again by its first incremental fetch, which tells
                # the leader it fetched them within this session
                for key, data in found.items():
                    session.watch(key, partition_log(logs, key, self.partitions[key].topic_name))
                    if not session.privileged:
                        session.answered(key, cached[key], data)
            return session_id, found
        return INVALID_SESSION_ID, found


def new_context(cache: FetchSessionCache, session_id: int, epoch: int, wanted: dict[TopicPartition, FetchPartition],
                forgotten: list[TopicPartition], uses_topic_ids: bool, privileged: bool, now_ms: int) -> FetchContext:
    """The context of a Fetch with this session id and epoch (Kafka's FetchManager.newContext)."""
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full request closes the session it names
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return FetchContext(wanted)
        return FetchContext(wanted, create_in=cache, privileged=privileged, uses_topic_ids=uses_topic_ids)
    session = cache.get(session_id)
    if session is None:
        return FetchContext({}, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return FetchContext({}, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_topic_ids != uses_topic_ids:
        return FetchContext({}, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    session.update(wanted, forgotten)
    if not session.partitions:
        cache.remove(session.id)
        return FetchContext(wanted)
    cache.touch(session, now_ms)
    session.previous_fetch_ms, session.fetch_ms = session.fetch_ms, clock.monotonic_ms()
    session.epoch = next_epoch(session.epoch)
    return FetchContext(SessionRequests(session.partitions), session=session)
