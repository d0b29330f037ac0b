"""An acks=all Produce whose batches are appended and whose answer waits for the in-sync replicas (Kafka's
DelayedProduce).

Its connection goes on handling the requests behind it meanwhile (server.py) and answers them all in
order: a producer's pipelined requests are appended as they come and each waits for its own
replication only, as in Kafka, where the follower's next fetch completes them all together. Were
the connection to wait for each answer before handling the next request, every request would also
wait out the replication of all those in front of it, and a deep pipeline (librdkafka's default
without idempotence) would queue for seconds.

It is completed by callbacks, not by a task of its own: the follower fetch that moves a high watermark
completes every Produce waiting for it in its own turn, and their connections each write all the answers
that became ready in one go. A task, a future and a timeout context per request cost more than the
request's append, and each answer written on its own cost a system call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator

from storage import clock

_PENDING = object()


class DelayedProduce:
    """The answer of a Produce appended on every partition it could be, once each waiting partition's high
    watermark passes its batch (or the request's timeout passes, or the leadership ends)."""

    __slots__ = ("response", "waits", "errors", "pending", "timeout_s", "timer", "on_complete")

    def __init__(self, response: dict, waits: list, timeout_ms: int) -> None:
        self.response = response
        # (partition, offset, leader epoch, the partition's result in ``response``); offset None: an acks=1
        # append that waits only for its new leadership's epoch checkpoint to be durable
        self.waits = waits
        self.errors = [_PENDING] * len(waits)
        self.pending = len(waits)
        self.timeout_s = timeout_ms / 1000
        self.timer: asyncio.TimerHandle | None = None
        self.on_complete: Callable[[dict], None] | None = None

    def start(self, on_complete: Callable[[dict], None]) -> None:
        """Watch the high watermarks; ``on_complete(response)`` once every partition is decided -- maybe at
        once, and otherwise in the turn of the fetch that decides the last: it must only note the answer and
        schedule its sending (it runs in the middle of moving a high watermark)."""
        self.on_complete = on_complete
        self.timer = clock.call_later(self.timeout_s, self._expire)
        for i, (partition, offset, epoch, _) in enumerate(self.waits):
            def durable(i=i, partition=partition, epoch=epoch) -> None:
                self._decided(i, partition.durable_error(epoch))

            def reached(ok: bool, i=i, partition=partition, epoch=epoch, durable=durable) -> None:
                error = partition.replication_error(ok, epoch)
                if error:
                    self._decided(i, error)
                else:  # committed; acknowledged once its leadership's epoch checkpoint is durable too
                    partition.when_epoch_checkpoint_synced(durable)

            if offset is None:  # acks=1 in a leadership just taken: only its epoch checkpoint to wait for
                partition.when_epoch_checkpoint_synced(durable)
            elif delay := partition.manager.replication_wait_delay_s:  # the fault hook of slow replication
                partition.log_wait_delay(offset, delay)
                clock.call_later(delay, partition.watch_high_watermark, offset, epoch, reached)
            else:
                partition.watch_high_watermark(offset, epoch, reached)

    def _decided(self, i: int, error) -> None:
        if self.errors[i] is not _PENDING:
            return  # (timed out before: the heap keeps a wait until the high watermark passes it)
        self.errors[i] = error
        self.pending -= 1
        if not self.pending:
            self.timer.cancel()
            for (_, _, _, result), error in zip(self.waits, self.errors, strict=True):
                if error:
                    result["error_code"], result["base_offset"] = error, -1
            self.on_complete(self.response)

    def _expire(self) -> None:
        for i, (partition, _, epoch, _) in enumerate(self.waits):
            if self.errors[i] is _PENDING:
                self._decided(i, partition.leadership_error(epoch))

    def __await__(self) -> Generator:
        """For a request handled in a task of its own (a transactional Produce verified first)."""
        answered = asyncio.get_running_loop().create_future()
        self.start(answered.set_result)
        return answered.__await__()
