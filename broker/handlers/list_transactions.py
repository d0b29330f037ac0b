"""ListTransactions: the transactional ids this coordinator knows, filtered (KIP-664; v1 adds KIP-994's duration)."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TRANSACTIONAL_ID
from broker.transaction.metadata import TransactionState

API = Api("ListTransactions", (0, 1), acl=IN_HANDLER)


def handle(broker, request, header) -> dict:
    names = request["state_filters"]
    known = {name: TransactionState.from_wire_name(name) for name in names}
    # a filter of unknown states only matches nothing, as in Kafka
    states = {state for state in known.values() if state is not None} if names else None
    listed = broker.transactions.list_transactions(states, set(request["producer_id_filters"]),
                                                   request["duration_filter"])
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": [name for name, state in known.items() if state is None],
        "transaction_states": [
            {"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
             "transaction_state": txn.state.wire_name}
            for txn in listed if broker.authorizer.authorize(header, "Describe", TRANSACTIONAL_ID, txn.transactional_id)
        ],
    }
