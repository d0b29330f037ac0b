"""``queued.max.requests``: how many requests the broker holds read but not yet handled, all
connections together (Kafka's request channel between its network and handler threads).

Here one event loop both reads and handles, so what waits is a connection's requests past the few
it handles in one turn (server.py lets every connection have a turn before a connection's next
batch). A request holds its place from the moment it is read until its handling starts: one that
then waits (a long-polling Fetch, an acks=all Produce, a JoinGroup) holds none, nor do requests
queued behind it, since they wait for their own connection, not for the broker (Kafka leaves them
unread in the socket of a muted channel). When the queue is full, connections stop reading; each
place that frees up lets the connection that waited longest read, so none waits forever behind
newer ones or behind another connection's backlog.
"""

from __future__ import annotations


class RequestQueue:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.queued = 0
        self._waiting: dict = {}  # connections that stopped reading for want of room, oldest first

    @property
    def full(self) -> bool:
        return self.queued >= self.capacity

    def hold(self, count: int) -> None:
        self.queued += count

    def release(self, count: int) -> None:
        """``count`` requests leave the queue: as many waiting connections (the longest waiting first)
        may read again, even while the queue stays full (one read adds more than one request), so those
        waiting take turns with the requests already read."""
        self.queued -= count
        for _ in range(min(count, len(self._waiting))):
            connection = next(iter(self._waiting))
            del self._waiting[connection]
            connection.room_available()

    def wait(self, connection) -> None:
        """``connection`` stopped reading because the queue is full; it is told when there is room."""
        self._waiting.setdefault(connection, None)

    def forget(self, connection) -> None:
        self._waiting.pop(connection, None)
