"""Consumer groups: the group coordinator and the __consumer_offsets topic it persists to."""

from .coordinator import GroupCoordinator
from .manager import OFFSETS_TOPIC

__all__ = ["GroupCoordinator", "OFFSETS_TOPIC"]
