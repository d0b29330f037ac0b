"""A Fetch response's answer for a partition with nothing to return, encoded directly (sans-io).

A consumer fetching thousands of partitions without a fetch session (librdkafka
never opens one) is told, for nearly all of them, only the high watermark, last
stable offset and log start offset. The broker keeps these answers encoded (they
change only when those offsets do) and hands them to the codec as ``Encoded``
elements; the bytes are what ``codec`` writes for the same PartitionData dict.
"""

from __future__ import annotations

import struct

from .codec import Encoded, is_flexible

_NO_PREFERRED_READ_REPLICA = -1


def _layout(version: int, read_committed: bool) -> tuple[struct.Struct, tuple]:
    """The struct of a PartitionData without error, records or tagged fields, and its trailing constants."""
    flexible = is_flexible("FetchResponse", version)
    # partitionIndex, errorCode, highWatermark, lastStableOffset (v4+), logStartOffset (v5+)
    fmt = ">ihqq" + ("q" if version >= 5 else "")
    tail: list[int] = []
    if flexible:  # compact lengths are one more than the length; 0 is null
        fmt += "Bi" + "BB"  # aborted transactions, preferred read replica, records, no tagged fields
        tail += [1 if read_committed else 0, _NO_PREFERRED_READ_REPLICA, 1, 0]
    else:
        fmt += "i"  # aborted transactions: an empty array for read_committed, else null
        tail.append(0 if read_committed else -1)
        if version >= 11:
            fmt += "i"
            tail.append(_NO_PREFERRED_READ_REPLICA)
        fmt += "i"  # records: empty
        tail.append(0)
    return struct.Struct(fmt), tuple(tail)


_LAYOUTS: dict[tuple[int, bool], tuple[struct.Struct, tuple]] = {}


def nothing_to_return(version: int, read_committed: bool, partition: int, high_watermark: int,
                      last_stable_offset: int, log_start_offset: int) -> Encoded:
    """The PartitionData of ``partition``: no error, no records, no aborted transactions, the offsets given."""
    key = (version, read_committed)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = _layout(version, read_committed)
    packer, tail = layout
    offsets = (high_watermark, last_stable_offset, log_start_offset) if version >= 5 else (high_watermark,
                                                                                            last_stable_offset)
    return Encoded(packer.pack(partition, 0, *offsets, *tail))
