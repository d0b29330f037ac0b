"""ApiVersions: the versions of every API this broker serves, and its features (v3+).

transaction.version 2 (KIP-890 part 2) is finalized: clients that know it
(Java kafka-clients 4.x) bump the epoch at every EndTxn and let Produce and
TxnOffsetCommit add partitions to the transaction; others keep to version 1.
"""

from broker.errors import ErrorCode
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
    return {
        "error_code": 0, "api_keys": _api_keys(), "throttle_time_ms": 0,
        "supported_features": [{"name": "transaction.version", "min_version": 0, "max_version": TRANSACTION_VERSION}],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": "transaction.version", "min_version_level": TRANSACTION_VERSION,
                                "max_version_level": TRANSACTION_VERSION}],
    }


def unsupported_version() -> dict:
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
