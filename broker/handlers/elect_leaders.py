"""ElectLeaders (KIP-460): make the preferred replica (the first in replica order) the leader, or elect
an out-of-sync replica where no in-sync one is alive (unclean); topic_partitions null means all."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME

API = Api("ElectLeaders", (0, 2), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    election_type = request["election_type"] if header.api_version >= 1 else 0
    if election_type not in (0, 1):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "replica_election_results": []}
    wanted = request["topic_partitions"]
    if not broker.authorizer.authorize(header, "Alter", CLUSTER, CLUSTER_NAME):
        return _refused(wanted or [], ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if wanted is None:
        wanted = [{"topic": t.name, "partitions": list(range(t.num_partitions))} for t in broker.logs.topics.values()]
    results = []
    for want in wanted:
        partitions = []
        for index in want["partitions"]:
            error, message = await broker.store.elect_leader(want["topic"], index, election_type)
            partitions.append({"partition_id": index, "error_code": ErrorCode[error] if error else ErrorCode.NONE,
                               "error_message": message})
        results.append({"topic": want["topic"], "partition_result": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "replica_election_results": results}


def _refused(wanted: list[dict], error: ErrorCode) -> dict:
    """The error for the request and each partition it names, as Kafka answers a refused election."""
    return {"throttle_time_ms": 0, "error_code": error, "replica_election_results": [
        {"topic": want["topic"], "partition_result": [{"partition_id": index, "error_code": error, "error_message": None}
                                                      for index in want["partitions"]]}
        for want in wanted]}
