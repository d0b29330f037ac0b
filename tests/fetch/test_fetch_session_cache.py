"""The fetch session cache's eviction rules (Kafka's FetchSessionCache), with the clock in the test's hands.

Two minutes of the broker's time cannot pass inside `make test`; these are the rules the broker
tests (tests/integration/test_fetch_sessions.py) cannot wait for.
"""

from __future__ import annotations

from broker.fetch.fetch_session import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    new_context,
    next_epoch,
)
from broker.fetch.log_read import FOLLOWER, READ_COMMITTED, FetchPartition, PartitionData, TopicPartition
from storage.config import LogConfig
from storage.log_manager import LogManager
from tests.storage.storage_support import append, make_batch


def partitions(n: int) -> dict:
    return {TopicPartition("t", p): CachedPartition(FetchPartition(0, 1024)) for p in range(n)}


def test_a_full_cache_takes_no_young_session_from_a_client():
    cache = FetchSessionCache(2)
    assert cache.maybe_create(0, False, partitions(1), False) != INVALID_SESSION_ID
    assert cache.maybe_create(0, False, partitions(1), False) != INVALID_SESSION_ID
    assert cache.maybe_create(EVICTION_MS, False, partitions(100), False) == INVALID_SESSION_ID


def test_a_stale_session_is_evicted_first():
    cache = FetchSessionCache(2)
    stale = cache.maybe_create(0, False, partitions(100), False)
    used = cache.maybe_create(0, False, partitions(1), False)
    cache.touch(cache.get(used), EVICTION_MS)
    new = cache.maybe_create(EVICTION_MS + 1, False, partitions(1), False)
    assert new != INVALID_SESSION_ID and cache.get(stale) is None and cache.get(used) is not None


def test_an_old_session_gives_way_only_to_a_more_valuable_one():
    cache = FetchSessionCache(2)
    small = cache.maybe_create(0, False, partitions(5), False)
    big = cache.maybe_create(0, False, partitions(50), False)
    now = EVICTION_MS + 1
    for session_id in (small, big):
        cache.touch(cache.get(session_id), now)  # in use, so not stale, but older than two minutes
    assert cache.maybe_create(now, False, partitions(5), False) == INVALID_SESSION_ID, "no more valuable"
    third = cache.maybe_create(now, False, partitions(6), False)
    assert third != INVALID_SESSION_ID and cache.get(small) is None and cache.get(big) is not None


def test_a_follower_may_evict_a_young_client_session():
    cache = FetchSessionCache(1)
    client = cache.maybe_create(0, False, partitions(500), False)
    assert cache.maybe_create(1, True, partitions(1), False) != INVALID_SESSION_ID
    assert cache.get(client) is None
    assert cache.maybe_create(2, True, partitions(1000), False) == INVALID_SESSION_ID, "young followers stay"


def test_epochs_wrap_to_one_and_final_stays_final():
    assert next_epoch(0) == 1 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_an_incremental_fetch_skips_only_partitions_with_nothing_to_read(tmp_path):
    """A session's partition at the high watermark it was last told is left out of an incremental read;
    a follower's is read while the log end is past its fetch offset (it replicates up to the log end)."""
    logs = LogManager(tmp_path, LogConfig())
    logs.create_topic("t", 1)
    log_ = logs.log("t", 0)
    append(log_, make_batch(3))
    log_.set_high_watermark(2)
    key = TopicPartition("t", 0)
    for isolation, read in ((READ_COMMITTED, False), (0, False), (FOLLOWER, True)):
        cache = FetchSessionCache(10)
        found = {key: PartitionData(0, 2, 2, 0)}
        follower = isolation == FOLLOWER
        full = new_context(cache, 0, 0, {key: FetchPartition(2, 1024)}, [], False, follower, 0)
        session_id, _ = full.respond(found, 0, logs)
        context = new_context(cache, session_id, 1, {}, [], False, follower, 0)
        assert (key in context.to_read(logs, isolation, {}, context.candidates())) is read, isolation
    logs.close()


def test_an_incremental_fetch_looks_only_at_partitions_whose_logs_changed(tmp_path):
    """A client's session is told of appends, log start moves and deletion by the logs it watches; an
    incremental fetch looks at those partitions, the ones it names and the ones with errors, no others."""
    logs = LogManager(tmp_path, LogConfig())
    logs.create_topic("t", 100)
    for p in range(100):
        append(logs.log("t", p), make_batch(1))
    keys = [TopicPartition("t", p) for p in range(100)] + [TopicPartition("gone", 0)]
    cache = FetchSessionCache(10)
    full = new_context(cache, 0, 0, {key: FetchPartition(1, 1024) for key in keys}, [], False, False, 0)
    found = {key: PartitionData(0, 1, 1, 0) for key in keys[:100]} | {keys[100]: PartitionData(3)}
    session_id, _ = full.respond(found, 0, logs)

    def looked_at(epoch: int, named=()) -> set[int | str]:
        context = new_context(cache, session_id, epoch, {keys[p]: FetchPartition(1, 1024) for p in named}, [],
                              False, False, 0)
        candidates = context.candidates()
        read = context.to_read(logs, 0, {}, candidates)
        context.respond({key: PartitionData(0, logs.log("t", key.partition).high_watermark, 1,
                                            logs.log("t", key.partition).log_start_offset) if key.topic == "t"
                         else PartitionData(3) for key in read}, 0, logs)
        return {key.partition if key.topic == "t" else key.topic for key in candidates}

    assert looked_at(1) == {"gone"}, "only the partition with an error"
    append(logs.log("t", 7), make_batch(2))
    logs.delete_records("t", 42, 1)
    assert looked_at(2, named=[3]) == {"gone", 3, 7, 42}
    assert looked_at(3) == {"gone", 7}, "7 is behind its high watermark until the client names it"
    session = cache.get(session_id)
    cache.remove(session_id)
    assert not any(session in logs.log("t", p).watchers for p in range(100)), "a closed session stops watching"
    logs.close()


def test_a_followers_session_looks_again_only_at_partitions_that_changed(tmp_path):
    """A follower's session: its first incremental fetch looks at every partition (the leader records the
    follower's position in each); after that only at partitions whose logs changed or that it names, while
    each fetch of the session moves the time it counts as a caught-up fetch of the others."""
    logs = LogManager(tmp_path, LogConfig())
    logs.create_topic("t", 50)
    for p in range(50):
        append(logs.log("t", p), make_batch(1))
        logs.log("t", p).set_high_watermark(1)
    keys = [TopicPartition("t", p) for p in range(50)]
    cache = FetchSessionCache(10)
    full = new_context(cache, 0, 0, {key: FetchPartition(1, 1024) for key in keys}, [], False, True, 0)
    session_id, _ = full.respond({key: PartitionData(0, 1, 1, 0) for key in keys}, 0, logs)
    session = cache.get(session_id)

    def looked_at(epoch: int, named=()) -> set[int]:
        context = new_context(cache, session_id, epoch, {keys[p]: FetchPartition(2, 1024) for p in named}, [],
                              False, True, 0)
        candidates = context.candidates()
        read = context.to_read(logs, FOLLOWER, {}, candidates)
        context.respond({key: PartitionData(0, logs.log("t", key.partition).high_watermark, 1, 0) for key in read},
                        0, logs)
        return {key.partition for key in candidates}

    assert looked_at(1) == set(range(50)), "the first incremental fetch records the follower everywhere"
    before = session.fetch_ms
    assert looked_at(2) == set(), "caught up everywhere, nothing changed: nothing to look at"
    assert session.previous_fetch_ms == before <= session.fetch_ms
    append(logs.log("t", 7), make_batch(1))
    assert looked_at(3) == {7}, "an append tells the session"
    assert looked_at(4, named=[7]) == {7}, "the follower names its new position"
    logs.log("t", 7).set_high_watermark(2)
    assert looked_at(5) == {7}, "the new high watermark is for the follower to learn"
    assert looked_at(6) == {7}, "told; the next look finds it settled"
    assert looked_at(7) == set()
    logs.close()
