"""Application crash loop: the exactly-once copy app is SIGKILLed mid-transaction, again and again.

Two members of one consume-transform-produce group (verify.workloads
copy-app, each with its own transactional.id) copy a topic that idempotent
and transactional producers keep writing (with aborted transactions the
copiers must skip). Each cycle kills one member with SIGKILL while its
transaction is open -- checked with DescribeTransactions before it is
restarted under the same transactional.id -- so the new incarnation must
fence the old one and abort its transaction, and the group rebalances twice
(the dead member times out, the new one joins) while the other member keeps
committing transactions. The broker stays up. `moldau verify` must then find
every input record copied exactly once, no copy of an aborted or killed
transaction visible, and the group's offsets matching the copies.

MOLDAU_CHAOS_APP_KILLS sets the number of mid-transaction kills (3 in
`make test`, 20 in `make chaos`); MOLDAU_CHAOS_SEED replays a run's moments.
"""

from __future__ import annotations

import time

import pytest

from helpers.groups import GROUP_BROKER
from helpers.reliability import (
    COPY_TOPIC,
    PARTITIONS,
    TOPIC,
    Workload,
    WorkloadRun,
    budget,
    record_result,
    seeded_random,
    wait_for,
)
from helpers.wire import WireClient

KILLS = budget(3, 20, "MOLDAU_CHAOS_APP_KILLS")
COPIERS = ["copier-a", "copier-b"]
PLAN = [
    Workload("idempotent-producer", "idem-0", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 1500}),
    Workload("transactional-producer", "txn-0", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 600,
                                                 "txn_size": 6, "abort_every": 3}),
    *(Workload("copy-app", name, {"topic": TOPIC, "output": COPY_TOPIC, "group": "crash-copier"}) for name in COPIERS),
]


def transactions_ended(run: WorkloadRun, name: str) -> int:
    """Transactions the copier ``name`` (all its incarnations) has journaled as committed or aborted."""
    path = run.journal_dir / f"{name}.jsonl"
    return path.read_bytes().count(b'"kind":"txn"') if path.exists() else 0


def transaction_state(probe: WireClient, transactional_id: str) -> str:
    """DescribeTransactions on a connection kept open: fast enough to catch a copier mid-transaction."""
    answer = probe.request("DescribeTransactions", 0, {"transactional_ids": [transactional_id]})
    return answer["transaction_states"][0]["transaction_state"]


@pytest.mark.timeout(budget(300, 1800))
def test_copy_app_killed_mid_transaction_stays_exactly_once(start_broker, tmp_path):
    rng, seed = seeded_random(f"app crash loop: {KILLS} kills")
    b = start_broker(GROUP_BROKER)
    started = time.monotonic()
    probe = WireClient(b.port)
    kills = attempts = 0
    try:
        with WorkloadRun(b, tmp_path / "journal", PLAN) as run:
            while kills < KILLS:
                attempts += 1
                assert attempts <= 10 * KILLS, f"only {kills} of {attempts} kills landed inside a transaction"
                # both members copying again: the group has settled since the last restart
                marks = {name: transactions_ended(run, name) for name in COPIERS}
                wait_for(lambda: all(transactions_ended(run, n) >= marks[n] + 2 for n in COPIERS), 90,
                         f"both copiers committing before kill {attempts}")
                run.wait_for_progress(f"before kill {attempts}")
                victim = rng.choice(COPIERS)
                # a copier spends most of its time waiting for input: catch it with a transaction open
                wait_for(lambda: transaction_state(probe, victim) == "Ongoing", 30,
                         f"{victim} to open a transaction", interval=0.001)
                run.processes[[w.name for w in PLAN].index(victim)].kill()
                # the dead app's transaction stays Ongoing until its successor fences it (once
                # requests the app sent before it died are served: an EndTxn may still be on its way)
                time.sleep(0.2)
                if transaction_state(probe, victim) == "Ongoing":
                    kills += 1
                run.kill_and_restart(victim, pause=rng.uniform(0.0, 1.0))
            run.wait_for_progress("after the last restart")
            verdict = run.finish()
    finally:
        probe.close()

    stats = verdict["stats"]
    assert stats["copies"] > 1000, stats
    assert b.log_text().count("aborting the open transaction of") >= kills, "each successor fenced its predecessor"
    record_result(
        "app_crash_loop",
        kills_mid_transaction=kills,
        kill_attempts=attempts,
        seed=seed,
        workloads=[w.name for w in PLAN],
        records_checked=stats["read_committed"],
        copies_checked=stats["copies"],
        transactions_in_doubt=stats.get("txn_in_doubt", 0),
        violations=verdict["violations"],
        seconds=round(time.monotonic() - started, 1),
    )
