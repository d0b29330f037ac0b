"""DescribeLogDirs: the broker's log directory, its partitions' sizes and its free space."""

import logging
import shutil

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME

API = Api("DescribeLogDirs", (1, 4), acl=IN_HANDLER)

log = logging.getLogger("moldau.describe_log_dirs")


def handle(broker, request, header) -> dict:
    if not broker.authorizer.authorize(header, "Describe", CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "results": []}
    wanted = request["topics"]  # None: every partition
    by_topic: dict[str, list[dict]] = {}
    for (name, partition), log_ in sorted(broker.logs.logs.items()):
        if wanted is not None and not any(t["topic"] == name and partition in t["partitions"] for t in wanted):
            continue
        by_topic.setdefault(name, []).append(
            {"partition_index": partition, "partition_size": log_.size_bytes, "offset_lag": 0, "is_future_key": False}
        )
    result = {"error_code": 0, "log_dir": str(broker.config.log_dir.resolve()),
              "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
              "total_bytes": -1, "usable_bytes": -1}
    try:
        usage = shutil.disk_usage(broker.config.log_dir)
        result.update(total_bytes=usage.total, usable_bytes=usage.free)
    except OSError as exc:
        log.error("cannot read the size of %s: %s", broker.config.log_dir, exc)
        result["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
    return {"throttle_time_ms": 0, "error_code": 0, "results": [result]}
