"""A transactional producer of its own, for the broker crash test: numbered transactions over several partitions.

    txn_producer_app.py BOOTSTRAP TRANSACTIONAL_ID FIRST COUNT PROGRESS_FILE TOPIC:PARTITION...

Transaction k (FIRST <= k < FIRST + COUNT) writes RECORDS records "k:i" to
every partition and commits; then "k" is appended as a line to
PROGRESS_FILE. A transaction whose commit was acknowledged must end up
entirely visible to read_committed readers, in every partition.
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer

RECORDS = 4
TIMEOUT_S = 60


def main(bootstrap: str, transactional_id: str, first: str, count: str, progress_path: str, *partitions: str) -> int:
    targets = [(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1])) for tp in partitions]
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4",
                         "transactional.id": transactional_id, "log.connection.close": False})
    producer.init_transactions(TIMEOUT_S)
    for k in range(int(first), int(first) + int(count)):
        producer.begin_transaction()
        for topic, partition in targets:
            for i in range(RECORDS):
                producer.produce(topic, value=b"%d:%d" % (k, i), partition=partition)
        producer.commit_transaction(TIMEOUT_S)
        with open(progress_path, "a") as f:
            f.write(f"{k}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
