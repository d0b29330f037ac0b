"""An acks=all Produce whose batches are appended and whose answer waits for the in-sync replicas (Kafka's
DelayedProduce).

Its connection goes on handling the requests behind it meanwhile (server.py) and answers them all in
order: a producer's pipelined requests are appended as they come and each waits for its own
replication only, as in Kafka, where the follower's next fetch completes them all together. Were
the connection to wait for each answer before handling the next request, every request would also
wait out the replication of all those in front of it, and a deep pipeline (librdkafka's default
without idempotence) would queue for seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator


class DelayedProduce:
    """The awaitable answer of a Produce appended on every partition it could be."""

    __slots__ = ("answer",)

    def __init__(self, answer: Awaitable[dict]) -> None:
        self.answer = answer

    def __await__(self) -> Generator:
        return self.answer.__await__()
