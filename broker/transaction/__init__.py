"""Transactions: the transaction coordinator and the __transaction_state topic it persists to."""

from .coordinator import TRANSACTION_VERSION, TransactionCoordinator, fenced_for_version
from .state_manager import TRANSACTION_STATE_TOPIC

__all__ = ["TRANSACTION_VERSION", "TransactionCoordinator", "TRANSACTION_STATE_TOPIC", "fenced_for_version"]
