"""Transactions: the transaction coordinator and the __transaction_state topic it persists to."""

from .coordinator import TransactionCoordinator, fenced_for_version
from .state_manager import TRANSACTION_STATE_TOPIC

__all__ = ["TransactionCoordinator", "TRANSACTION_STATE_TOPIC", "fenced_for_version"]
