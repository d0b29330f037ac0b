import errno
import os

import pytest
from storage_support import make_batch, split_batches

from protocol.records import parse_produce_records
from storage.segment import LogSegment, whole_batches_length


def _segment(directory, base_offset=0, index_interval_bytes=200):
    return LogSegment(directory, base_offset, index_interval_bytes, now_ms=0, create=True)


def _fill(segment, count, records=2):
    """Append ``count`` batches one by one with offsets assigned from the segment base."""
    offset = segment.base_offset
    for i in range(count):
        buf = bytearray(make_batch(records, timestamp_ms=1_000 + i, tag=i))
        batches = parse_produce_records(buf)
        buf[0:8] = offset.to_bytes(8, "big")
        segment.append(buf, [(p, h._replace(base_offset=offset)) for p, h in batches])
        offset += records


def test_files_are_named_by_base_offset(tmp_path):
    segment = _segment(tmp_path, base_offset=1200)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000001200.index",
        "00000000000000001200.log",
        "00000000000000001200.timeindex",
    ]
    segment.close()


def test_append_tracks_size_offsets_timestamps_and_sparse_index(tmp_path):
    segment = _segment(tmp_path, base_offset=10)
    _fill(segment, 40)
    assert segment.size == os.path.getsize(segment.log_path)
    assert segment.next_offset == 10 + 80
    assert segment.max_timestamp == 1_039
    assert segment.offset_of_max_timestamp == 10 + 78
    batch_size = len(make_batch(2))
    # An entry once index_interval_bytes were appended since the previous one.
    positions = sorted({segment.offset_index.lookup(offset)[1] for offset in range(10, 90)})
    gaps = [b - a for a, b in zip(positions, positions[1:], strict=False)]
    assert len(positions) == len(segment.offset_index) + 1  # the segment start needs no entry
    assert gaps and all(200 <= gap < 200 + batch_size for gap in gaps)
    segment.close()


def test_find_position_returns_the_batch_holding_the_offset(tmp_path):
    segment = _segment(tmp_path)
    _fill(segment, 30, records=3)
    batch_size = len(make_batch(3))
    for offset in range(90):
        position, hdr = segment.find_position(offset)
        assert hdr.base_offset == offset - offset % 3
        assert position == (offset // 3) * batch_size
    assert segment.find_position(90) is None
    segment.close()


def test_read_returns_whole_batches_within_limits(tmp_path):
    segment = _segment(tmp_path)
    _fill(segment, 10)
    batch_size = len(make_batch(2))
    assert len(split_batches(segment.read(0, 3 * batch_size + 5, segment.size))) == 3
    assert len(split_batches(segment.read(batch_size, 1, segment.size))) == 1  # first batch even if too big
    assert len(split_batches(segment.read(0, 10**6, 4 * batch_size))) == 4  # end position bounds it
    assert segment.read(segment.size, 100, segment.size) == b""
    segment.close()


def test_a_repeated_read_is_answered_from_memory_until_the_segment_is_truncated(tmp_path):
    """Each follower of a partition reads the same new batches: the second one gets the first one's bytes,
    without a pread -- but never bytes a truncation has replaced."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    segment, other = _segment(tmp_path / "a"), _segment(tmp_path / "b")
    _fill(segment, 4)
    _fill(other, 4)
    batch_size = len(make_batch(2))
    first = segment.read(2 * batch_size, 10**6, segment.size)
    assert segment.read(2 * batch_size, 10**6, segment.size) is first
    assert segment.read(2 * batch_size, 10**6, 3 * batch_size) is not first, "another end is another read"
    first = segment.read(2 * batch_size, 10**6, segment.size)
    assert other.read(2 * batch_size, 10**6, other.size) is not first, "the entry is the segment's"
    for end in range(1, 17):  # sixteen other reads: the broker keeps no more than that
        other.read(0, 10**6, end * batch_size // 4)
    assert segment.read(2 * batch_size, 10**6, segment.size) is not first

    # a follower cut back to a diverging epoch, then given the new leader's batches: the same read asked again
    segment.read(2 * batch_size, 10**6, segment.size)
    segment.truncate_to(2 * batch_size)
    for offset in (4, 6):
        buf = bytearray(make_batch(2, timestamp_ms=5_000 + offset, tag=100 + offset))
        buf[0:8] = offset.to_bytes(8, "big")
        segment.append(buf, [(p, h._replace(base_offset=offset)) for p, h in parse_produce_records(buf)])
    assert segment.size == 4 * batch_size
    again = segment.read(2 * batch_size, 10**6, segment.size)
    with open(segment.log_path, "rb") as stored:
        stored.seek(2 * batch_size)
        assert bytes(again) == stored.read()
    assert bytes(again) != bytes(first)
    segment.close()
    other.close()


def _append_at(segment, offset, tag, frame=None):
    """Append one batch of two records at ``offset``; ``frame``: a larger buffer whose start it is written in."""
    batch = make_batch(2, timestamp_ms=5_000 + offset, tag=tag)
    buf = bytearray(batch) if frame is None else frame
    buf[: len(batch)] = batch
    buf[0:8] = offset.to_bytes(8, "big")
    view = buf if frame is None else memoryview(frame)[: len(batch)]
    segment.append(view, [(p, h._replace(base_offset=offset)) for p, h in parse_produce_records(view)])
    return view


def test_a_read_of_just_what_an_append_wrote_gets_its_bytes(tmp_path):
    """The followers an append wakes ask for exactly its batches: they get the appended buffer, not a pread of
    it -- but only for exactly that, the batches written since a truncation, and never a view that would keep
    a large request alive."""
    segment = _segment(tmp_path)
    _fill(segment, 2)
    size = len(make_batch(2))
    written = _append_at(segment, 4, tag=4)

    def stored(position: int, end: int) -> bytes:
        with open(segment.log_path, "rb") as file:
            file.seek(position)
            return file.read(end - position)

    assert segment.read(2 * size, 10**6, 3 * size) is written
    assert bytes(written) == stored(2 * size, 3 * size)
    assert segment.read(size, 10**6, 3 * size) is not written, "more than the append: read from the file"
    assert bytes(segment.read(2 * size, size - 1, 3 * size)) == stored(2 * size, 3 * size), \
        "a first batch over max_bytes is read as KIP-74 says"

    # a follower cut back to a diverging epoch, then given other batches at the same place
    segment.truncate_to(2 * size)
    assert segment.read(2 * size, 10**6, 2 * size) == b""
    replaced = _append_at(segment, 4, tag=40)
    assert bytes(replaced) != bytes(written)
    assert bytes(segment.read(2 * size, 10**6, 3 * size)) == bytes(replaced) == stored(2 * size, 3 * size)

    # a batch that is a view into a large request is written, not kept
    in_frame = _append_at(segment, 6, tag=6, frame=bytearray(3 * 1024 * 1024))
    read = segment.read(3 * size, 10**6, 4 * size)
    assert read is not in_frame and bytes(read) == bytes(in_frame) == stored(3 * size, 4 * size)
    segment.close()


def test_whole_batches_length_stops_before_a_partial_batch():
    data = make_batch(1) + make_batch(2)
    assert whole_batches_length(data) == len(data)
    assert whole_batches_length(data[:-1]) == len(make_batch(1))
    assert whole_batches_length(data[:5]) == 0


def test_recover_truncates_a_torn_tail(tmp_path):
    segment = _segment(tmp_path)
    _fill(segment, 5)
    full = segment.size
    batch_size = len(make_batch(2))
    os.truncate(segment.log_path, full - 10)
    segment.size = full - 10  # as a reopened segment would see it
    truncation = segment.recover()
    assert truncation.bytes_truncated == batch_size - 10
    assert truncation.offset == 8
    assert truncation.reason == "truncated batch"
    assert segment.size == os.path.getsize(segment.log_path) == 4 * batch_size
    assert segment.next_offset == 8
    assert segment.recover() is None  # nothing left to repair
    segment.close()


def test_rebuilt_indexes_answer_like_the_originals(tmp_path):
    segment = _segment(tmp_path, index_interval_bytes=100)
    _fill(segment, 50)
    before = [segment.find_position(o)[0] for o in range(100)]
    entries = len(segment.offset_index)
    segment.rebuild_indexes()
    assert len(segment.offset_index) == entries
    assert [segment.find_position(o)[0] for o in range(100)] == before
    assert segment.find_timestamp(1_020)[1].max_timestamp == 1_020
    segment.close()


def test_failed_write_leaves_the_segment_as_it_was(tmp_path, monkeypatch):
    segment = _segment(tmp_path)
    _fill(segment, 3)
    size, next_offset = segment.size, segment.next_offset
    real_pwrite = os.pwrite
    calls = []

    def disk_fills_up(fd, data, position):
        calls.append(len(data))
        if len(calls) == 1:
            return real_pwrite(fd, bytes(data)[: len(data) // 2], position)  # partial write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", disk_fills_up)
    buf = bytearray(make_batch(2))
    with pytest.raises(OSError) as excinfo:
        segment.append(buf, parse_produce_records(buf))
    assert excinfo.value.errno == errno.ENOSPC
    assert len(calls) == 2
    assert (segment.size, segment.next_offset) == (size, next_offset)
    assert os.path.getsize(segment.log_path) == size
    monkeypatch.undo()
    _fill(segment, 1)  # writes go on once space is back
    assert segment.recover() is None
    segment.close()
