"""Consumer groups: the group coordinator and the __consumer_offsets topic it persists to."""

from .coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
