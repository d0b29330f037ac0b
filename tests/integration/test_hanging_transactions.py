"""Hanging transactions (KIP-664): found, logged and aborted by an operator against a running broker.

A transaction no coordinator knows is made by hand: a transactional batch of
an unknown producer id appended to the partition's segment while the broker
is down. Its partition's last stable offset then stays put; the broker names
the partition in a log line, `moldau transactions find-hanging` lists it (and
not the open transaction of a live producer next to it), and `moldau
transactions abort` ends it, after which the LSO moves on.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from helpers.txn_wire import (
    NONE,
    READ_COMMITTED,
    begin,
    create_topic,
    end_txn,
    log_end,
    lso,
    produce,
    txn_batch,
    wait_for,
)
from helpers.wire import WireClient
from protocol.records import build_batch, iter_records, scan_batches

REPO_ROOT = Path(__file__).resolve().parents[2]
HAND_MADE_PID = 987_654
INVALID_REQUEST = 42


def moldau_transactions(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker", "transactions", "--bootstrap-server", broker.bootstrap,
                           *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def read_committed_values(c: WireClient, topic: str) -> list[bytes]:
    r = c.request("Fetch", 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                "isolation_level": READ_COMMITTED, "topics": [{"topic": topic, "partitions": [
                                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    part = r["responses"][0]["partitions"][0]
    aborted = {a["producer_id"] for a in part["aborted_transactions"]}
    values = []
    for pos, hdr in scan_batches(part["records"]):
        if not hdr.is_control and hdr.producer_id not in aborted:
            values += [rec.value for rec in iter_records(part["records"], pos)]
    return values


def test_a_hand_made_hanging_transaction_is_found_logged_and_aborted(start_broker):
    b = start_broker({"transaction.max.timeout.ms": 15000,
                      "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    with WireClient(b.port) as c:
        create_topic(c, "wedged")
        assert produce(c, "wedged", build_batch([(None, b"before")])) == NONE
    b.kill()
    segment = b.segment_files("wedged", 0)[-1]
    old = int(time.time() * 1000) - 120_000
    with segment.open("ab") as f:
        f.write(build_batch([(None, b"hanging")], base_offset=1, producer_id=HAND_MADE_PID, producer_epoch=3,
                            base_sequence=0, transactional=True, timestamp_ms=old))
    b.start()

    with WireClient(b.port) as c:
        assert (lso(c, "wedged"), log_end(c, "wedged")) == (1, 2), "stuck at the hand-made transaction"
        b.wait_for_log(r"wedged-0: the last stable offset has stayed at 1 .* producer 987654 ", timeout=30)

        # a live producer's open transaction (its timeout, 15 s, outlasts the tool runs below on a loaded machine)
        live = begin(c, "live-app", "wedged", [0], timeout_ms=15000)
        assert produce(c, "wedged", txn_batch(live, 0, b"live"), "live-app") == NONE

        found = moldau_transactions(b, "find-hanging", "--topic", "wedged", "--max-transaction-timeout", "0")
        assert found.returncode == 0, found.stderr
        header, *rows = found.stdout.splitlines()
        assert header.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                                  "StartOffset", "LastTimestamp", "Duration(min)"]
        assert [row.split()[:7] for row in rows] == [["wedged", "0", str(HAND_MADE_PID), "3", "-1", "1", str(old)]], \
            "only the hand-made transaction: the live producer's coordinator holds its partition"
        live_state = c.request("DescribeTransactions", 0, {"transactional_ids": ["live-app"]})["transaction_states"][0]
        assert live_state["transaction_state"] == "Ongoing", "the live transaction was open while the tool looked"

        for offset, refusal in ((0, "no open transaction starts at offset 0"), (2, "is not hanging")):
            refused = moldau_transactions(b, "abort", "--topic", "wedged", "--partition", "0", "--start-offset",
                                          str(offset))
            assert refused.returncode == 1 and refusal in refused.stderr, refused
        assert end_txn(c, live, committed=True) == NONE
        wait_for(lambda: log_end(c, "wedged") == 4, "the live commit marker is written")
        assert lso(c, "wedged") == 1, "still held by the hanging transaction"

        # a coordinator epoch no coordinator has would fence the real one here: refused
        forged = c.request("WriteTxnMarkers", 1, {"markers": [{
            "producer_id": HAND_MADE_PID, "producer_epoch": 3, "transaction_result": False, "coordinator_epoch": 1000,
            "topics": [{"name": "wedged", "partition_indexes": [0]}]}]})
        assert forged["markers"][0]["topics"][0]["partitions"][0]["error_code"] == INVALID_REQUEST
        assert lso(c, "wedged") == 1

        aborted = moldau_transactions(b, "abort", "--topic", "wedged", "--partition", "0", "--start-offset", "1")
        assert aborted.returncode == 0, aborted.stderr
        assert f"producer {HAND_MADE_PID} (epoch 3) starting at offset 1" in aborted.stdout
        assert lso(c, "wedged") == log_end(c, "wedged") == 5, "the LSO moved on"
        again = moldau_transactions(b, "find-hanging", "--topic", "wedged", "--max-transaction-timeout", "0")
        assert again.returncode == 0 and again.stdout.splitlines()[1:] == []

        assert read_committed_values(c, "wedged") == [b"before", b"live"]

    for bootstrap in ("127.0.0.1:1", "no-port"):  # one line and exit code 1, no traceback
        failed = subprocess.run([sys.executable, "-m", "broker", "transactions", "--bootstrap-server", bootstrap,
                                 "find-hanging"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert failed.returncode == 1 and len(failed.stderr.splitlines()) == 1, failed
