"""ApiVersions: the versions of every API this broker serves, and its features (v3+).

transaction.version 2 (KIP-890 part 2) is finalized: clients that know it
(Java kafka-clients 4.x) bump the epoch at every EndTxn and let Produce and
TxnOffsetCommit add partitions to the transaction; others keep to version 1.
share.version 1 (KIP-932's share groups) is finalized while group.share.enable is
on; off, it is 0 and the share group APIs clients call are not listed.
"""

from broker.errors import ErrorCode
from broker.share import SHARE_CLIENT_APIS, SHARE_VERSION
from broker.transaction import TRANSACTION_VERSION

API = "ApiVersions"
VERSIONS = (0, 4)

# A finalized level never changes here, so its epoch stays the same; clients only compare epochs.
FINALIZED_FEATURES_EPOCH = 1


def _api_keys() -> list[dict]:
    from . import HANDLERS  # the registry imports this module first

    return [
        {"api_key": key, "min_version": h.min_version, "max_version": h.max_version}
        for key, h in sorted(HANDLERS.items())
    ]


def handle(broker, request, header) -> dict:
    share = SHARE_VERSION if broker.config["group.share.enable"] else 0
    return {
        "error_code": 0, "throttle_time_ms": 0,
        "api_keys": [k for k in _api_keys() if share or k["api_key"] not in SHARE_CLIENT_APIS],
        "supported_features": [{"name": "transaction.version", "min_version": 0, "max_version": TRANSACTION_VERSION},
                               {"name": "share.version", "min_version": 0, "max_version": SHARE_VERSION}],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": "transaction.version", "min_version_level": TRANSACTION_VERSION,
                                "max_version_level": TRANSACTION_VERSION},
                               {"name": "share.version", "min_version_level": share, "max_version_level": share}],
    }


def unsupported_version() -> dict:
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
