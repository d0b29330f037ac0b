"""The pipeline end to end on the ``moldau`` format: killed mid-stream, restarted, its output exactly once.

The generator and the job run as processes (``python -m broker pipeline ...``)
against a real broker. The job is SIGKILLed at the worst moment for a sink:
a task has committed its transaction for a batch, and Spark has not yet
recorded the batch as done (``MOLDAU_PIPELINE_HOLD_AFTER_COMMIT`` makes the
task stop right there). The restarted job runs that batch again; its output
must still hold every window once, with the totals computed here in plain
Python from the transactions the generator committed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from helpers.pipeline import (
    CAP_S,
    REPO_ROOT,
    JobProcess,
    expected_totals,
    output_totals,
    read_topic,
    topic_values,
    wait_for_output,
)
from pipeline.events import flush_event, plan
from pipeline.sink import HOLD_ENV

SEED = 7
FIRST_RUN, SECOND_RUN = 30, 30  # transactions produced before the first run, and while the job is down


def generate(bootstrap: str, topic: str, first: int, count: int, *extra: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "broker", "pipeline", "generate", "--bootstrap", bootstrap, "--topic", topic,
         "--seed", str(SEED), "--first", str(first), "--transactions", str(count), *extra],
        cwd=REPO_ROOT, check=True, timeout=CAP_S,  # a backstop: its client calls time out on their own
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a backstop: every wait gives up once nothing moves (helpers.pipeline.Progress)
def test_output_is_exactly_once_after_sigkill_and_restart(start_broker, tmp_path):
    # Records carry their events' times (2023) as timestamps: with the default 7-day retention the input's
    # closed segments go at the first retention check, 5 minutes in, which a loaded machine reaches.
    broker = start_broker({"log.retention.ms": -1})
    source, sink = "events", "event-totals"
    txns = plan(SEED, 0, FIRST_RUN + SECOND_RUN)
    committed = [e for t in txns if t.commit for e in t.events]
    aborted = [e for t in txns if not t.commit for e in t.events]
    expected = expected_totals(committed)  # the flush event's window never closes, so it is not in the output
    assert aborted, "the plan must abort some transactions"

    generate(broker.bootstrap, source, 0, FIRST_RUN)
    args = ["--bootstrap", broker.bootstrap, "--input", source, "--output", sink,
            "--checkpoint", str(tmp_path / "checkpoint")]
    jobs = [JobProcess(args, tmp_path / "job.log", {HOLD_ENV: "0"})]
    try:
        held = jobs[0].start().wait_for_log(r"batch (\d+) partition (\d+): holding after commit")
        jobs[0].kill()
        held_batch, held_partition = map(int, held.groups())
        written_before_kill = sum(output_totals(read_topic(broker.bootstrap, sink)).values())
        assert written_before_kill > 0

        generate(broker.bootstrap, source, FIRST_RUN, SECOND_RUN, "--finish")
        jobs.append(JobProcess(args, tmp_path / "job.log").start())
        wait_for_output(broker.bootstrap, sink, sum(expected.values()), jobs[1].running, *jobs[1].signs())
        assert jobs[1].stop() == 0, jobs[1].tail()
    finally:
        for job in jobs:
            job.cleanup()

    got = output_totals(read_topic(broker.bootstrap, sink))
    duplicated = {row: n for row, n in got.items() if n > 1}
    assert not duplicated, f"windows written more than once: {duplicated}"
    assert got == expected, f"missing: {expected - got}\nunexpected: {got - expected}"

    # Spark ran the held batch again, and the sink found its part already committed
    replayed = rf"batch {held_batch} partition {held_partition}: already committed by an earlier run"
    assert re.search(replayed, jobs[1].log()), jobs[1].tail()

    # the input: every planned record is in the log, and read_committed hides exactly the aborted ones
    flush = flush_event(FIRST_RUN + SECOND_RUN - 1)
    assert topic_values(broker.bootstrap, source) == Counter(e.to_json() for e in committed + [flush])
    everything = Counter(e.to_json() for e in committed + aborted + [flush])
    assert topic_values(broker.bootstrap, source, "read_uncommitted") == everything
