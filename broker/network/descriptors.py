"""The open-file budget: raised at startup, split between segment files and connections.

Segment files go through storage.handles' LRU, so the partitions a broker holds no longer decide how
many descriptors it needs; what is left is for client connections (see max.connections).
"""

from __future__ import annotations

import logging
import resource
from typing import NamedTuple

from storage.handles import DEFAULT_CAPACITY, HANDLES

log = logging.getLogger("moldau.descriptors")

# Listener sockets, metadata and checkpoint files, snapshots, the event loop's own descriptors.
RESERVED = 64
# Below this the broker could hold too few segment files and connections to be of use.
MIN_OPEN_FILES = 256


class OpenFileLimitTooLow(Exception):
    pass


class Budget(NamedTuple):
    open_files: int  # the process's soft limit, after raising it
    segment_files: int  # the handle cache's capacity
    connections: int  # what is left for client connections


def plan() -> Budget:
    """Raise the soft limit to the hard one (as a daemon should), size the handle cache to a quarter of it
    (at most DEFAULT_CAPACITY) and log the split; OpenFileLimitTooLow if it cannot reach MIN_OPEN_FILES."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY:
        soft = target
    elif soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    if soft < MIN_OPEN_FILES:
        raise OpenFileLimitTooLow(
            f"the open-file limit is {soft} (hard limit {hard}); the broker needs at least {MIN_OPEN_FILES}: "
            f"raise it (ulimit -n, LimitNOFILE= in a systemd unit, nofile in limits.conf)")
    segment_files = min(DEFAULT_CAPACITY, soft // 4)
    HANDLES.set_capacity(segment_files)
    budget = Budget(soft, segment_files, soft - segment_files - RESERVED)
    log.info("open-file limit %d: up to %d segment files open at once, %d descriptors for connections",
             *budget)
    return budget
