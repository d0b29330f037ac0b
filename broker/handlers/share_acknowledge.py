"""ShareAcknowledge: accept, release, reject or (v2, KIP-1222) renew the lock of records a share consumer
acquired (KIP-932).

Each partition's acknowledgement batches are applied all or none (INVALID_RECORD_STATE
when an offset is not acquired by this member) and its new state is written to
__share_group_state before the answer. Epoch -1 also closes the share session,
releasing whatever the member still holds.
"""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP, TOPIC
from broker.share.manager import FINAL_EPOCH, INITIAL_EPOCH, SessionError
from broker.share.persister import ShareKey

API = Api("ShareAcknowledge", (1, 2), acl=IN_HANDLER, enabled_by="group.share.enable")


async def handle(broker, request, header):
    group_id, member_id, epoch = request["group_id"], request["member_id"], request["share_session_epoch"]
    if not broker.config["group.share.enable"]:
        return _error(ErrorCode.UNSUPPORTED_VERSION, "share groups are disabled (group.share.enable)")
    if not group_id or not member_id or epoch == INITIAL_EPOCH:
        return _error(ErrorCode.INVALID_REQUEST, "GroupId, MemberId and an open share session are required")
    if not broker.authorizer.authorize(header, "Read", GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    manager = broker.share.partitions
    try:
        manager.session(group_id, member_id, epoch, header.session)
    except SessionError as exc:
        return _error(exc.error)
    acks = {(t["topic_id"], p["partition_index"]): p["acknowledgement_batches"]
            for t in request["topics"] for p in t["partitions"]}
    results = {}
    for tp, error in (await acknowledge_all(broker, header, group_id, member_id, acks)).items():
        results[tp] = {"partition_index": tp[1], "error_code": error, "error_message": None,
                       "current_leader": leader_of(broker, tp) if error == ErrorCode.NOT_LEADER_OR_FOLLOWER
                       else {"leader_id": -1, "leader_epoch": -1}, "_topic_id": tp[0]}
    if epoch == FINAL_EPOCH:
        manager.close_session(group_id, member_id)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": broker.share.group_config(group_id, "share.record.lock.duration.ms"),
            "node_endpoints": node_endpoints(broker, header, results), "responses": response_topics(results)}


async def acknowledge_all(broker, header, group_id: str, member_id: str, acks: dict) -> dict:
    """(topic id, partition) -> the error of applying and writing its acknowledgement batches."""
    results = {}
    for tp, batches in acks.items():
        topic = broker.logs.topic_by_id(tp[0])
        if topic is not None and not broker.authorizer.authorize(header, "Read", TOPIC, topic.name):
            results[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        results[tp] = await broker.share.partitions.acknowledge(group_id, member_id, ShareKey(group_id, *tp), batches)
    return results


def leader_of(broker, tp) -> dict:
    topic = broker.logs.topic_by_id(tp[0])
    state = broker.store.cache.partition_state(topic.name, tp[1]) if topic is not None else None
    if state is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": state.leader, "leader_epoch": state.leader_epoch}


def node_endpoints(broker, header, results: dict) -> list[dict]:
    """The endpoints of the leaders named in NOT_LEADER_OR_FOLLOWER answers, so the client goes there at once."""
    leaders = {e["current_leader"]["leader_id"] for e in results.values()
               if e["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER}
    return [b for b in broker.brokers(header) if b["node_id"] in leaders]


def response_topics(results: dict) -> list[dict]:
    """Partition entries (each with its ``_topic_id``) grouped by topic, as the responses list them."""
    topics: dict = {}
    for entry in results.values():
        topics.setdefault(entry.pop("_topic_id"), []).append(entry)
    return [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]


def _error(error: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "acquisition_lock_timeout_ms": 0,
            "responses": [], "node_endpoints": []}
