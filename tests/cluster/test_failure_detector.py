"""The failure detector's confirmation (in process, real sockets): only a refused connection counts as a
dead broker; a listener whose process does not accept (stopped, busy) is alive."""

from __future__ import annotations

import asyncio
import socket

from broker.cluster.failure_detector import refuses


def test_only_a_refusal_confirms_a_dead_broker():
    bound = socket.socket()
    bound.bind(("127.0.0.1", 0))  # bound, nothing listening: a crashed process's port
    port = bound.getsockname()[1]
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)  # never accepted: a SIGSTOPped or stalled broker, the kernel completes the handshake
    try:
        assert asyncio.run(refuses("127.0.0.1", port))
        assert not asyncio.run(refuses("127.0.0.1", listening.getsockname()[1]))
    finally:
        bound.close()
        listening.close()
