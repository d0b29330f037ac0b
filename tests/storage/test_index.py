import os
import struct

import pytest

from storage.errors import CorruptIndex
from storage.index import OffsetIndex, TimeIndex


def test_offset_index_lookup_finds_greatest_entry_at_or_below(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", base_offset=100, create=True)
    for offset, position in [(100, 0), (110, 500), (125, 1200)]:
        index.maybe_append(offset, position)
    index.maybe_append(125, 1300)  # not increasing: ignored
    assert len(index) == 3
    assert index.lookup(99) == (100, 0)  # below the first entry: the segment start
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 500)
    assert index.lookup(124) == (110, 500)
    assert index.lookup(10_000) == (125, 1200)
    assert index.last_entry() == (125, 1200)
    index.close()


def test_time_index_keeps_only_growing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", base_offset=50, create=True)
    index.maybe_append(1_000, 50)
    index.maybe_append(900, 60)  # an older timestamp adds nothing
    index.maybe_append(2_000, 70)
    assert len(index) == 2
    assert index.lookup(500) == 50
    assert index.lookup(1_999) == 50
    assert index.lookup(2_000) == 70
    assert index.last_entry() == (2_000, 70)
    index.close()


def test_entries_reach_the_file_and_load_back(tmp_path):
    path = tmp_path / "a.index"
    index = OffsetIndex(path, base_offset=7, create=True)
    index.maybe_append(7, 0)
    index.maybe_append(9, 64)
    assert path.stat().st_size == 0  # buffered until written
    index.close()
    assert path.read_bytes() == struct.pack(">IIII", 0, 0, 2, 64)
    reopened = OffsetIndex(path, base_offset=7)
    reopened.load(log_size=128)
    assert reopened.lookup(10) == (9, 64)
    reopened.close()


def test_reset_empties_memory_and_file(tmp_path):
    path = tmp_path / "a.timeindex"
    index = TimeIndex(path, base_offset=0, create=True)
    index.maybe_append(5, 1)
    index.flush()
    index.reset()
    assert len(index) == 0 and path.stat().st_size == 0
    assert index.lookup(5) == 0
    index.close()


def _write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize(
    "data, problem",
    [
        (b"\x00" * 7, "not a multiple"),
        (struct.pack(">IIII", 5, 10, 3, 20), "out of order"),
        (struct.pack(">IIII", 1, 10, 2, 10), "out of order"),
        (struct.pack(">II", 1, 4096), "beyond the log size"),
    ],
)
def test_offset_index_validation(tmp_path, data, problem):
    path = tmp_path / "a.index"
    _write(path, data)
    index = OffsetIndex(path, base_offset=0)
    with pytest.raises(CorruptIndex, match=problem):
        index.load(log_size=4096)
    index.close()


def test_time_index_validation(tmp_path):
    path = tmp_path / "a.timeindex"
    _write(path, struct.pack(">qIqI", 2_000, 1, 1_000, 2))
    index = TimeIndex(path, base_offset=0)
    with pytest.raises(CorruptIndex, match="out of order"):
        index.load(log_size=4096)
    index.close()


def test_missing_file_is_reported(tmp_path):
    path = tmp_path / "a.index"
    index = OffsetIndex(path, base_offset=0)
    with pytest.raises(CorruptIndex, match="missing"):
        index.load(log_size=0)
    assert os.path.exists(path)  # created, ready to be rebuilt
    index.close()
