"""kill -9 loop: real clients keep working while the broker is killed and restarted at random moments.

The workloads of helpers.reliability.PLAN (idempotent and transactional
producers, a consumer group that commits after processing, an exactly-once
consume-transform-produce app) run as `verify.workloads` processes, each
journaling what it was acknowledged, committed or processed. After the last
restart the producers are stopped, the groups catch up, and `moldau verify`
must find every acknowledged record exactly once and in order, every
transaction all or nothing, nothing aborted visible to read_committed, and
no committed group offset past a record that was not processed or copied.

MOLDAU_CHAOS_CYCLES sets the number of kills (3 in `make test`, 25 in
`make chaos`); MOLDAU_CHAOS_SEED replays a run's kill moments.
"""

from __future__ import annotations

import time

import pytest

from helpers.groups import GROUP_BROKER
from helpers.reliability import PARTITIONS, PLAN, WorkloadRun, budget, record_result, seeded_random

CYCLES = budget(3, 25, "MOLDAU_CHAOS_CYCLES")
# small segments: rolls, producer-state snapshots and index entries all through the run
BROKER = {**GROUP_BROKER, "log.segment.bytes": 512 * 1024}


@pytest.mark.timeout(budget(240, 1800))
def test_acknowledged_records_survive_kill_9_loop(start_broker, tmp_path):
    rng, seed = seeded_random(f"kill loop: {CYCLES} cycles")
    b = start_broker(BROKER)
    started = time.monotonic()
    with WorkloadRun(b, tmp_path / "journal") as run:
        for cycle in range(CYCLES):
            run.wait_for_progress(f"in broker run {cycle + 1}")
            time.sleep(rng.uniform(0.0, 2.5))
            b.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            b.restart()
        run.wait_for_progress("after the last restart")
        verdict = run.finish()

    assert b.returncodes.count(-9) == CYCLES
    stats = verdict["stats"]
    assert stats["acks"] > 1000 * CYCLES and stats["group_partitions"] == 2 * PARTITIONS, stats
    record_result(
        "kill_loop",
        cycles=CYCLES,
        seed=seed,
        workloads=[w.name for w in PLAN],
        records_checked=stats["read_committed"],
        acks_checked=stats["acks"],
        violations=verdict["violations"],
        seconds=round(time.monotonic() - started, 1),
    )
