"""A broker that hangs (SIGSTOP) for longer than the clients' session timeout, then carries on.

Nothing is lost on the broker's side, but every client sees it vanish: the
group members' sessions time out on the client (librdkafka gives up the
assignment as lost and rejoins), requests time out and are retried, and
the exactly-once copy app finds its assignment gone in the middle of its
work. The workloads of helpers.reliability.PLAN run through several such
pauses, then `moldau verify` must pass: in particular no input record may be
copied twice because an app committed copies under an assignment it had lost.

MOLDAU_CHAOS_PAUSES sets the number of pauses (2 in `make test`, 8 in `make chaos`).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers.groups import GROUP_BROKER
from helpers.reliability import WorkloadRun, budget, record_result, seeded_random

PAUSES = budget(2, 8, "MOLDAU_CHAOS_PAUSES")
SESSION_TIMEOUT_S = 6  # the workloads' session.timeout.ms


@pytest.mark.timeout(budget(240, 900))
def test_clients_outlive_a_broker_paused_past_their_session_timeout(start_broker, tmp_path):
    rng, seed = seeded_random(f"broker pauses: {PAUSES}")
    b = start_broker(GROUP_BROKER)
    started = time.monotonic()
    with WorkloadRun(b, tmp_path / "journal") as run:
        for pause in range(PAUSES):
            run.wait_for_progress(f"before pause {pause + 1}")
            time.sleep(rng.uniform(0.0, 1.0))
            os.kill(b.pid, signal.SIGSTOP)
            try:
                time.sleep(SESSION_TIMEOUT_S + rng.uniform(1.0, 3.0))
            finally:
                os.kill(b.pid, signal.SIGCONT)
        run.wait_for_progress("after the last pause")
        verdict = run.finish()
    record_result(
        "broker_pauses",
        pauses=PAUSES,
        seed=seed,
        records_checked=verdict["stats"]["read_committed"],
        copies_checked=verdict["stats"]["copies"],
        violations=verdict["violations"],
        seconds=round(time.monotonic() - started, 1),
    )
