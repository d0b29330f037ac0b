"""A TCP relay in front of a broker that records the request frames clients send through it."""

from __future__ import annotations

import socket
import struct
import threading

from helpers.fault_proxy import accepted


class CaptureRelay:
    """A TCP relay in front of a broker that keeps every request frame clients send through it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port = 0
        self.frames: list[bytes] = []
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        for client in accepted(self.listener):
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, server]
            threading.Thread(target=self._relay, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._relay, args=(server, client, False), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        pending = bytearray()
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if requests:
                    pending += data
                    while len(pending) >= 4 and len(pending) >= 4 + (size := struct.unpack_from(">i", pending)[0]):
                        self.frames.append(bytes(pending[: 4 + size]))
                        del pending[: 4 + size]
        except OSError:
            pass
        finally:
            sink.close()

    def close(self) -> None:
        self.listener.close()
        for s in self._sockets:
            s.close()


def broker_behind_relay(start_broker, overrides: dict | None = None) -> tuple[object, CaptureRelay, str]:
    """A broker that advertises a relay in front of it: (broker, relay, the relay's bootstrap address)."""
    relay = CaptureRelay()
    b = start_broker({**(overrides or {}), "advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay.port}"})
    relay.upstream_port = b.port
    return b, relay, f"127.0.0.1:{relay.port}"
