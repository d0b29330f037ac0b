"""Transactions through crashes: of the application (exactly once) and of the broker (all or nothing).

The applications run as processes of their own (tests/helpers/txn_*_app.py)
so that they can be SIGKILLed like a real deployment. The broker is killed
between PrepareCommit and CompleteCommit by the test-only
MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS hook (broker/faults.py), which sends it
SIGKILL right after its Nth transaction marker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from helpers.kafka import COMMON, Msg, create_topic, produce_all
from helpers.txn_producer_app import RECORDS
from helpers.txn_transform_app import transform
from helpers.wire import WireClient

HELPERS = Path(__file__).resolve().parent.parent / "helpers"
KILL_AFTER_MARKERS_ENV = "MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS"
DEADLINE_S = 60


def run_app(script: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HELPERS / script), *map(str, args)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def read_to_end(bootstrap: str, tps: list[tuple[str, int]], isolation: str) -> dict[tuple[str, int], list]:
    """Every (offset, value) a reader with ``isolation`` gets, up to the high watermark of each partition."""
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": "crash-reader",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        ends = {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=10, cached=False)[1] for tp in tps}
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        got: dict[tuple[str, int], list] = {tp: [] for tp in tps}
        deadline = time.monotonic() + DEADLINE_S
        while any(tp.offset < ends[(tp.topic, tp.partition)] for tp in c.position(c.assignment())):
            assert time.monotonic() < deadline, f"{isolation} reader stuck before {ends}"
            for m in c.consume(num_messages=1000, timeout=0.2):
                assert m.error() is None, f"consumer error: {m.error()}"
                got[(m.topic(), m.partition())].append((m.offset(), m.value()))
        return got
    finally:
        c.close()


def test_consume_transform_produce_is_exactly_once_across_application_crashes(start_broker, tmp_path):
    b = start_broker({"group.initial.rebalance.delay.ms": 0})
    create_topic(b.bootstrap, "ctp-in", partitions=2)
    create_topic(b.bootstrap, "ctp-out", partitions=2)
    now = int(time.time() * 1000)
    inputs = [Msg(i, i % 2, b"k%d" % i, b"record-%04d" % i, None, now) for i in range(400)]
    produce_all(b.bootstrap, "ctp-in", inputs)
    progress = tmp_path / "progress"
    app = ("txn_transform_app.py", b.bootstrap, "ctp-in", "ctp-out", "ctp-group", "ctp-app", progress)

    for _ in range(3):
        progress.unlink(missing_ok=True)
        proc = run_app(*app)
        deadline = time.monotonic() + DEADLINE_S
        while True:  # two transactions in, then kill it inside the next one
            assert proc.poll() is None, f"the app exited early: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the app made no progress"
            state = progress.read_text().split() if progress.exists() else ["0", "none"]
            if int(state[0]) >= 2 and state[1] == "open":
                break
            time.sleep(0.005)
        kill(proc)
    proc = run_app(*app)
    _, err = proc.communicate(timeout=DEADLINE_S * 2)
    assert proc.returncode == 0, f"the last incarnation failed: {err.decode()[-3000:]}"

    tps = [("ctp-out", 0), ("ctp-out", 1)]
    committed = read_to_end(b.bootstrap, tps, "read_committed")
    for p in (0, 1):
        want = [transform(m.value) for m in inputs if m.partition == p]
        got = [v for _, v in committed[("ctp-out", p)]]
        assert got == want, f"ctp-out[{p}]: {len(got)} records, expected {len(want)}, each exactly once in order"
    everything = read_to_end(b.bootstrap, tps, "read_uncommitted")
    assert sum(map(len, everything.values())) > 400, "the records of the killed transactions are in the log"
    assert b.log_text().count("aborting the open transaction of <transaction ctp-app Ongoing") == 3, (
        "each new incarnation aborts the transaction the killed one left open")

    c = Consumer({**COMMON, "bootstrap.servers": b.bootstrap, "group.id": "ctp-group"})
    try:
        offsets = c.committed([TopicPartition("ctp-in", p) for p in (0, 1)], timeout=10)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in offsets} == {0: 200, 1: 200}


def _run_until_the_broker_dies(b, tmp_path, first: int, targets: list[str]) -> None:
    proc = run_app("txn_producer_app.py", b.bootstrap, "crash-app", first, 1000, tmp_path / "committed", *targets)
    assert b.proc.wait(DEADLINE_S) == -signal.SIGKILL, "the fault hook should have killed the broker"
    b.kill()  # bookkeeping only: it is dead already
    kill(proc)


def test_transactions_stay_all_or_nothing_when_the_broker_dies_between_prepare_and_complete(
        start_broker, monkeypatch, tmp_path):
    tps = [("crash-a", 0), ("crash-a", 1), ("crash-b", 0)]
    targets = [f"{t}:{p}" for t, p in tps]
    # 3 markers per transaction: the 5th is the 2nd of the second transaction
    monkeypatch.setenv(KILL_AFTER_MARKERS_ENV, "5")
    b = start_broker({"log.level": "INFO,moldau.transaction=DEBUG"})  # one line per completed transaction
    create_topic(b.bootstrap, "crash-a", partitions=2)
    create_topic(b.bootstrap, "crash-b", partitions=1)
    _run_until_the_broker_dies(b, tmp_path, 0, targets)
    assert "killing the broker after transaction marker 5" in b.log_text()

    # after the restart the 3 markers of the interrupted transaction go out again; the 7th is
    # the first of the second new transaction
    monkeypatch.setenv(KILL_AFTER_MARKERS_ENV, "7")
    since = b.log_offset()
    b.start()
    b.wait_for_log(r"completing <transaction crash-app PrepareCommit .*> left by the previous coordinator", since=since)
    _run_until_the_broker_dies(b, tmp_path, 100, targets)

    monkeypatch.delenv(KILL_AFTER_MARKERS_ENV)
    since = b.log_offset()
    b.start()
    b.wait_for_log(r"completing <transaction crash-app PrepareCommit .*> left by the previous coordinator", since=since)
    b.wait_for_log(r"committed <transaction crash-app CompleteCommit", since=since)

    committed = read_to_end(b.bootstrap, tps, "read_committed")
    per_txn = Counter()
    for records in committed.values():
        per_txn.update(int(v.split(b":")[0]) for _, v in records)
    partial = {k: n for k, n in per_txn.items() if n != RECORDS * len(tps)}
    assert not partial, f"transactions visible in only some partitions (records seen): {partial}"
    acknowledged = {int(line) for line in (tmp_path / "committed").read_text().split()}
    assert acknowledged <= set(per_txn), f"committed but not visible: {sorted(acknowledged - set(per_txn))}"
    assert {1, 101} <= set(per_txn), "the transactions the broker died in were completed after the restarts"
    with WireClient(b.port) as c:
        state = c.request("DescribeTransactions", 0, {"transactional_ids": ["crash-app"]})["transaction_states"][0]
    assert state["transaction_state"] == "CompleteCommit"
