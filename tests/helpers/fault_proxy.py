"""A TCP fault proxy on 127.0.0.1: network partitions between processes of one machine.

A ``FaultProxy`` listens on a free port and forwards every connection to its
target. Each connection belongs to a *source*: the proxy's fixed one (a
broker's own proxy to an etcd member), or the node id in its Kafka client id,
read from the connection's first request (``moldau-replica-fetcher-2`` and
``broker-2-txn-marker-sender`` are node 2), so one proxy in front of a broker's inter-broker listener can cut
some brokers off and let others through. Per source the proxy

- passes (the default);
- drops: closes that source's connections and closes each new one at once
  (a peer that resets: the client sees errors right away);
- blackholes: accepts, but holds every byte in both directions until healed
  (a silent network: the client sees nothing until its own timeouts).

Healing lets held bytes through in order, as TCP would after a partition.
"""

from __future__ import annotations

import re
import socket
import struct
import threading

PASS, DROP, BLACKHOLE = "pass", "drop", "blackhole"
_NODE = re.compile(rb"\d+")  # moldau-replica-fetcher-2, broker-2-txn-marker-sender


def kafka_source(first_frame: bytes) -> int | None:
    """The node id in the client id of a Kafka request (request header v1+: int16-length client id)."""
    if len(first_frame) < 14:
        return None
    (length,) = struct.unpack_from(">h", first_frame, 12)
    found = _NODE.search(first_frame[14:14 + max(length, 0)])
    return int(found.group()) if found else None


class FaultProxy:
    def __init__(self, target: tuple[str, int], source: int | None = None) -> None:
        self.target = target
        self.source = source  # None: each connection's from its first Kafka request
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.modes: dict[int | None, str] = {}
        self._changed = threading.Condition()
        self._open: list[tuple[int | None, socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True, name=f"fault-proxy-{self.port}").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def mode(self, source: int | None) -> str:
        return self.modes.get(source, PASS)

    def set(self, mode: str, sources) -> None:
        """Put the connections of ``sources`` in ``mode``; dropping closes the open ones now."""
        with self._changed:
            for source in sources:
                self.modes[source] = mode
            self._changed.notify_all()
            if mode == DROP:
                for source, a, b in self._open:
                    if source in sources:
                        _close(a, b)

    def heal(self) -> None:
        with self._changed:
            self.modes.clear()
            self._changed.notify_all()

    def close(self) -> None:
        self.listener.close()
        self.heal()
        with self._changed:
            for _, a, b in self._open:
                _close(a, b)

    def _accept(self) -> None:
        for client in accepted(self.listener):
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        first = b""
        source = self.source
        try:
            if source is None:  # read the first request frame to learn who is calling
                while len(first) < 4 or len(first) < 4 + struct.unpack_from(">i", first)[0]:
                    chunk = client.recv(65536)
                    if not chunk:
                        raise OSError("closed before its first request")
                    first += chunk
                    if len(first) >= 64:  # the header is in; the rest is forwarded as it comes
                        break
                source = kafka_source(first)
            if not self._gate(source):
                raise OSError("dropped")
            upstream = socket.create_connection(self.target, timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        with self._changed:
            self._open.append((source, client, upstream))
        try:
            upstream.sendall(first)
        except OSError:
            _close(client, upstream)
            return
        threading.Thread(target=self._pump, args=(source, client, upstream), daemon=True).start()
        self._pump(source, upstream, client)
        with self._changed:
            self._open = [c for c in self._open if c[1] is not client]

    def _gate(self, source: int | None) -> bool:
        """Wait while ``source`` is blackholed; False if it is dropped."""
        with self._changed:
            while self.mode(source) == BLACKHOLE:
                self._changed.wait()
            return self.mode(source) == PASS

    def _pump(self, source: int | None, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._gate(source):
                    break
                dst.sendall(data)
        except OSError:
            pass
        _close(src, dst)


def accepted(listener: socket.socket):
    """Each connection ``listener`` accepts, until it is closed."""
    while True:
        try:
            yield listener.accept()[0]
        except OSError:
            return


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
