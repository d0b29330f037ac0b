"""ShareFetch: acknowledge, then acquire records of a share group's partitions under a lock (KIP-932).

The request's acknowledgements are applied (and written) first, then records are
acquired from the partitions of the member's share session, at most MaxRecords in
all (whole batches). The response carries the batches and the acquired offset
ranges with their delivery counts; the client drops records outside them. A fetch
that acquires nothing waits up to MaxWaitMs for appends or releases, then tries once more.
"""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP, TOPIC
from broker.share.manager import FINAL_EPOCH, INITIAL_EPOCH, SessionError
from broker.share.persister import ShareKey

from .share_acknowledge import acknowledge_all, leader_of, node_endpoints, response_topics

API = Api("ShareFetch", (1, 2), acl=IN_HANDLER, enabled_by="group.share.enable")

DEFAULT_MAX_RECORDS = 500  # a request that names no positive MaxRecords
RECORD_LIMIT = 1  # v2's ShareAcquireMode (KIP-1206): MaxRecords is a strict limit, batches may be split


async def handle(broker, request, header):
    group_id, member_id, epoch = request["group_id"], request["member_id"], request["share_session_epoch"]
    if not broker.config["group.share.enable"]:
        return _error(ErrorCode.UNSUPPORTED_VERSION, 0, "share groups are disabled (group.share.enable)")
    if not group_id or not member_id:
        return _error(ErrorCode.INVALID_REQUEST, 0, "GroupId and MemberId are required")
    lock_ms = broker.share.group_config(group_id, "share.record.lock.duration.ms")
    if not broker.authorizer.authorize(header, "Read", GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED, lock_ms)
    acks = {(t["topic_id"], p["partition_index"]): p["acknowledgement_batches"]
            for t in request["topics"] for p in t["partitions"] if p["acknowledgement_batches"]}
    if epoch == INITIAL_EPOCH and acks:
        return _error(ErrorCode.INVALID_REQUEST, lock_ms, "a new share session carries no acknowledgements")
    manager = broker.share.partitions
    try:
        session = manager.session(group_id, member_id, epoch, header.session)
    except SessionError as exc:
        return _error(exc.error, lock_ms)
    results: dict[tuple, dict] = {}
    for tp, error in (await acknowledge_all(broker, header, group_id, member_id, acks)).items():
        results[tp] = _partition(tp, acknowledge_error_code=error)
    if epoch == FINAL_EPOCH:
        manager.close_session(group_id, member_id)
        return _response(broker, header, results, lock_ms)
    if request.get("is_renew_ack"):  # v2 (KIP-1222): a request that only renews locks acquires nothing
        return _response(broker, header, results, lock_ms)
    for t in request["topics"]:
        for p in t["partitions"]:
            session.partitions[(t["topic_id"], p["partition_index"])] = None
    for t in request["forgotten_topics_data"]:
        for p in t["partitions"]:
            session.partitions.pop((t["topic_id"], p), None)
    max_records = request["max_records"] if request["max_records"] > 0 else DEFAULT_MAX_RECORDS
    max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
    limit = (max_records, request.get("share_acquire_mode") == RECORD_LIMIT)
    acquired = await _acquire(broker, header, group_id, member_id, session, limit, max_bytes, results)
    if not acquired and request["max_wait_ms"] > 0:
        await manager.wait_for_change(list(session.partitions), request["max_wait_ms"] / 1000)
        if manager.sessions.get((group_id, member_id)) is session:  # (not closed or replaced meanwhile)
            await _acquire(broker, header, group_id, member_id, session, limit, max_bytes, results)
    return _response(broker, header, results, lock_ms)


async def _acquire(broker, header, group_id, member_id, session, limit, max_bytes, results) -> int:
    """Acquire from the session's partitions in turn, ``limit`` = (MaxRecords, strictly); how many records."""
    max_records, strict = limit
    total = 0
    for tp in list(session.partitions):
        if total >= max_records or max_bytes <= 0:
            break
        topic = broker.logs.topic_by_id(tp[0])
        if topic is not None and not broker.authorizer.authorize(header, "Read", TOPIC, topic.name):
            results.setdefault(tp, _partition(tp))["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        error, data, ranges = await broker.share.partitions.acquire(
            group_id, member_id, ShareKey(group_id, *tp), max_records - total, max_bytes, strict)
        if error or ranges:
            entry = results.setdefault(tp, _partition(tp))
            entry["error_code"] = error
            if error == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                entry["current_leader"] = leader_of(broker, tp)
            entry["records"], entry["acquired_records"] = data, ranges
            total += sum(r["last_offset"] - r["first_offset"] + 1 for r in ranges)
            max_bytes -= len(data)
    return total


def _partition(tp, error_code=ErrorCode.NONE, acknowledge_error_code=ErrorCode.NONE) -> dict:
    return {"partition_index": tp[1], "error_code": error_code, "error_message": None,
            "acknowledge_error_code": acknowledge_error_code, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"", "acquired_records": [],
            "_topic_id": tp[0]}


def _response(broker, header, results: dict, lock_ms: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout_ms": lock_ms,
            "node_endpoints": node_endpoints(broker, header, results), "responses": response_topics(results)}


def _error(error: ErrorCode, lock_ms: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
            "acquisition_lock_timeout_ms": lock_ms, "responses": [], "node_endpoints": []}
