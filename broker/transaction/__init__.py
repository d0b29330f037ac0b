"""Transactions: the transaction coordinator and the __transaction_state topic it persists to."""

from .coordinator import TRANSACTION_VERSION, TransactionCoordinator, fenced_for_version

__all__ = ["TRANSACTION_VERSION", "TransactionCoordinator", "fenced_for_version"]
