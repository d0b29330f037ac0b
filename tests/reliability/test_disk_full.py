"""A full disk: the broker refuses writes with KAFKA_STORAGE_ERROR, stays up, and resumes when space is back.

The data directory is a small tmpfs (mounting one needs root or CAP_SYS_ADMIN;
without it the test is skipped, saying so) filled up with a ballast file while
the workload of helpers.reliability.PLAN runs. Segments roll every 256 KiB, so
index, snapshot and checkpoint writes fail as well as appends. Afterwards
`moldau verify` must pass and a clean restart must find nothing to repair.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from helpers.groups import GROUP_BROKER
from helpers.reliability import TOPIC, WorkloadRun, record_result, wait_for
from helpers.wire import WireClient
from protocol.records import build_batch
from storage.checkpoint import read_offset_checkpoint

DISK_MIB = 24
KAFKA_STORAGE_ERROR = 56
COORDINATOR_LOAD_IN_PROGRESS = 14
ID_BLOCK = 1000  # producer ids reserved per write of producer-id-block


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a {DISK_MIB} MiB tmpfs (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write a ballast file until not even one page fits."""
    ballast = disk / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        chunk = 1 << 20
        while chunk >= 4096:
            try:
                os.write(fd, bytes(chunk))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk //= 2
    finally:
        os.close(fd)
    return ballast


def produce_raw(port: int) -> int:
    """The error code of a plain one-record Produce to partition 0 (16 KiB: more than the slack of the
    segment file's last page, which a full disk would still take)."""
    batch = build_batch([(None, bytes(16 * 1024))])
    with WireClient(port) as c:
        r = c.request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def init_producer_ids(port: int, count: int, transactional_id: str | None = None) -> set[int]:
    """The error codes of ``count`` InitProducerId requests (of idempotent producers unless a
    transactional id is given)."""
    with WireClient(port) as c:
        return {c.request("InitProducerId", 4, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000,
                                                "producer_id": -1, "producer_epoch": -1})["error_code"]
                for _ in range(count)}


def recovery_point(b) -> int:
    return read_offset_checkpoint(b.data_dir / "recovery-point-offset-checkpoint").get((TOPIC, 0), 0)


@pytest.mark.timeout(240)
def test_full_disk_refuses_writes_and_recovers(small_disk, start_broker, tmp_path):
    b = start_broker(GROUP_BROKER, {"log.dirs": str(small_disk / "data"), "log.segment.bytes": 256 * 1024,
                                    "log.flush.interval.ms": 200})
    b.data_dir = small_disk / "data"
    started = time.monotonic()
    with WorkloadRun(b, tmp_path / "journal") as run:
        run.wait_for_progress("before the disk fills")

        mark = b.log_offset()
        ballast = fill(small_disk)
        b.wait_for_log(rf"append to {TOPIC}-\d+ failed: .*No space left on device", since=mark)
        assert produce_raw(b.port) == KAFKA_STORAGE_ERROR
        # reserving the next block of producer ids fails too: a retriable error, not a dropped connection
        assert COORDINATOR_LOAD_IN_PROGRESS in init_producer_ids(b.port, ID_BLOCK + 1)
        assert init_producer_ids(b.port, 1, "new-on-a-full-disk") == {COORDINATOR_LOAD_IN_PROGRESS}
        time.sleep(2)
        assert b.alive(), f"the broker died on a full disk:\n{b.log_tail()}"

        # space comes back while the broker runs: writes and time-based flushes resume
        ballast.unlink()
        run.wait_for_progress("after space was freed")
        point = recovery_point(b)
        wait_for(lambda: recovery_point(b) > point, 10, "the recovery point to move again (flushes resumed)")

        # a clean stop on a full disk closes what it can and says what it could not
        fill(small_disk)
        mark = b.log_offset()
        assert b.stop() == 0, b.log_tail()
        assert "shutdown: could not close" in b.log_since(mark), b.log_since(mark)
        with pytest.raises(RuntimeError, match="exited with code 1"):
            b.start()
        assert "moldau: cannot open" in b.log_since(mark), "a broker that cannot start on a full disk must say why"
        ballast.unlink()
        b.start()
        run.wait_for_progress("after a restart with space")
        verdict = run.finish()

    # nothing the full disk interrupted was left damaged: a clean restart repairs nothing
    b.stop()
    mark = b.log_offset()
    b.start()
    assert "recovery:" not in b.log_since(mark), b.log_since(mark)
    record_result(
        "disk_full",
        disk_mib=DISK_MIB,
        storage_errors_logged=b.log_text().count("No space left on device"),
        records_checked=verdict["stats"]["read_committed"],
        violations=verdict["violations"],
        seconds=round(time.monotonic() - started, 1),
    )
