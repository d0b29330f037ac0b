"""Write-heavy measurements start from the same memory: the page cache written back and dropped.

This machine is a VM whose host takes back the memory the guest leaves free (free page reporting).
Writing into memory it has not used lately costs ~2.4 ms of CPU per MB, against ~0.2 ms for memory
freed a moment ago, and a run turns from one to the other after its first gigabyte or so: the page
cache only grows. Which side of a comparison paid which was the run's history, not the server (an RF=3
row writes three times what its RF=1 row does; Moldau's log goes through the page cache, the wire
ceiling keeps batches in its own memory). docs/performance.md, "Issue 26, fourth session".
"""

from __future__ import annotations

import os
from pathlib import Path


def drop_page_cache() -> bool:
    """Write the page cache back and drop it; False where that needs root and this is not."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:  # not root: the rows run as the machine's memory happens to be
        return False
    return True
