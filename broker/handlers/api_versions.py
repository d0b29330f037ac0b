"""ApiVersions: the versions of every API this broker serves, and its features (v3+).

transaction.version 2 (KIP-890 part 2) is finalized: clients that know it
(Java kafka-clients 4.x) bump the epoch at every EndTxn and let Produce and
TxnOffsetCommit add partitions to the transaction; others keep to version 1.
share.version 1 (KIP-932's share groups) is finalized while group.share.enable is
on; off, it is 0 and the share group APIs clients call (enabled_by that setting) are not listed.
"""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import ANYONE
from broker.share import SHARE_VERSION
from broker.transaction import TRANSACTION_VERSION

# A finalized level never changes here, so its epoch stays the same; clients only compare epochs.
FINALIZED_FEATURES_EPOCH = 1


def _api_keys(config=None) -> list[dict]:
    """Every API's versions; with the broker's ``config``, only those of the APIs it enables."""
    from . import HANDLERS  # the registry imports this module first

    return [
        {"api_key": key, "min_version": h.min_version, "max_version": h.max_version}
        for key, h in HANDLERS.items() if config is None or h.enabled_by is None or config[h.enabled_by]
    ]


def unsupported_version() -> dict:
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}


API = Api("ApiVersions", (0, 4), acl=ANYONE, before_authentication=True, unsupported_version=unsupported_version)


def handle(broker, request, header) -> dict:
    share = SHARE_VERSION if broker.config["group.share.enable"] else 0
    return {
        "error_code": 0, "throttle_time_ms": 0,
        "api_keys": _api_keys(broker.config),
        "supported_features": [{"name": "transaction.version", "min_version": 0, "max_version": TRANSACTION_VERSION},
                               {"name": "share.version", "min_version": 0, "max_version": SHARE_VERSION}],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [{"name": "transaction.version", "min_version_level": TRANSACTION_VERSION,
                                "max_version_level": TRANSACTION_VERSION},
                               {"name": "share.version", "min_version_level": share, "max_version_level": share}],
    }
