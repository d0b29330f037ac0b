"""A follower's side of an incremental fetch session (KIP-227), as Kafka's FetchSessionHandler.

The first request is FULL (epoch 0): it names every partition, and the
leader answers with a session id. The next ones are INCREMENTAL (that id,
epoch 1, 2, ...): they name only partitions whose fetch position (fetch
offset, log start, leader epochs) changed since the last request, and forget
those the fetcher dropped. The leader lists only partitions with news, so
the fetcher keeps its own state for the rest. Any doubt about what the
leader's session holds (a session error, a lost connection, a response the
fetcher could not apply) starts over with a FULL request, which closes the
old session on the leader and opens a new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.errors import ErrorCode
from broker.fetch.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch


class FetchSessionHandler:
    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[tuple, dict] = {}  # (topic id, partition) -> what the leader's session holds for it

    def build(self, wanted: Mapping[tuple, dict], touched: Iterable[tuple]) -> dict:
        """The session fields of the next request for ``wanted`` ((topic id, partition) -> its request entry),
        given the keys whose entries may have changed (or gone) since the last build: session_id,
        session_epoch, topics, forgotten_topics_data. An incremental request costs what changed, not the
        session's size."""
        if self.epoch == INITIAL_EPOCH:
            named, forgotten = wanted, []
            self._sent = dict(wanted)
        else:
            named, forgotten = {}, []
            for key in touched:
                want = wanted.get(key)
                if want is None:
                    if self._sent.pop(key, None) is not None:
                        forgotten.append(key)
                elif self._sent.get(key) != want:
                    named[key] = self._sent[key] = want
        return {"session_id": self.session_id, "session_epoch": self.epoch,
                "topics": _by_topic((key[0], want) for key, want in named.items()),
                "forgotten_topics_data": _by_topic(forgotten)}

    def handle_response(self, response: dict) -> None:
        """Move to the next epoch, or back to a FULL request (Kafka's handleResponse)."""
        error = response["error_code"]
        if error != ErrorCode.NONE:
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH  # a FULL request that closes the session it names, if any
        elif response["session_id"] == INVALID_SESSION_ID:  # the leader keeps no session: FULL every time
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self.epoch == INITIAL_EPOCH:
            self.session_id, self.epoch = response["session_id"], next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)

    def start_over(self) -> None:
        """The leader's session may not hold what this side thinks (Kafka's handleError): FULL next."""
        self.epoch = INITIAL_EPOCH


def _by_topic(pairs) -> list[dict]:
    """(topic id, partition entry) pairs as the request's topic entries."""
    topics: dict = {}
    for topic_id, entry in pairs:
        topics.setdefault(topic_id, []).append(entry)
    return [{"topic_id": topic_id, "partitions": entries} for topic_id, entries in topics.items()]
