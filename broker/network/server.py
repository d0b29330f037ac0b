"""The asyncio TCP server: one KafkaConnection per client socket.

Like Kafka's socket server, a connection handles one request at a time and
answers in order: pipelined requests wait in a queue while a handler that
must wait (a long-polling Fetch) runs -- except an acks=all Produce that has
appended and waits for its replicas (delayed_produce.py): the requests behind
it are handled meanwhile, their answers held until its own has gone out. A
connection handles at most
_REQUESTS_PER_TURN requests before the others get a turn. It reads nothing
more while a request it sent waits to be handled (as Kafka mutes a channel
with a request in flight), while its socket's send buffer is full (a client
that never reads its responses cannot make the broker buffer without bound)
and, taking turns, while the broker-wide queued.max.requests wait (request_queue.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from protocol import codec
from protocol.errors import CorruptRecord
from protocol.frames import FrameDecoder, FrameError, decode_request_header, response_chunks
from storage import clock
from storage.cleaner import CleaningStopped

from .. import faults
from ..broker import Broker
from ..cluster import stages
from ..cluster.channel import InterBrokerChannel
from ..cluster.delayed_produce import DelayedProduce
from ..config.broker_config import ConfigError
from ..handlers import HANDLERS
from ..metrics import BrokerMetrics
from ..security import authorization, sasl, tls
from ..shutdown import within
from ..transaction.verification import TransactionVerifier
from .client_quotas import client_quota_throttle
from .connection_quotas import ConnectionQuotas
from .listeners import Listener, inter_broker_listener
from .request_queue import RequestQueue
from .session import Session

log = logging.getLogger("moldau.server")

CLEANER_SWITCH_INTERVAL_S = 0.0005
_LISTEN_BACKLOG = 1024
# a request this large is decoded, and its answer encoded, on a worker thread: a request naming a
# million topics takes seconds of codec work that would hold every other connection up
_LARGE_REQUEST_BYTES = 1 << 20
_REQUESTS_PER_TURN = 16  # then the other connections get a turn
# answers collected before they go to the transport: past this the transport's flow control
# (pause_writing) must get a say, or a client that never reads has every queued request answered in memory
_OUTBOX_LIMIT = 64 * 1024
# answers a connection may owe behind a Produce waiting for its replicas, and bytes of the Produces it holds
# meanwhile, before it handles no more requests (the client's in-flight requests bound them too, librdkafka's
# default being a million). A connection handles at most this many requests per replication round trip:
# a pipeline of one-record requests (librdkafka's default with linger.ms 0) needs thousands a second
_UNANSWERED_LIMIT = 4096
_UNANSWERED_BYTES = 32 << 20


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, listener: Listener, registry: set, drop_response: faults.ResponseDropper,
                 quotas: ConnectionQuotas, request_queue: RequestQueue):
        self.broker = broker
        self.quotas = quotas
        self.request_queue = request_queue
        self.held = 0  # places of request_queue this connection's queued requests hold
        self.turn_scheduled = False
        self.read_granted = False  # the request queue is full, but this connection's turn to read came
        self.ip: str | None = None  # set once the connection is admitted (counted by the quotas)
        self.muted_until = 0.0  # loop time before which requests wait: creation rate, client quotas
        self.last_active = clock.monotonic()  # for connections.max.idle.ms
        self.listener = listener
        self.session: Session | None = None
        self.registry = registry
        self.drop_response = drop_response
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        self.queue: deque = deque()
        self.read_times: deque = deque()  # when each queued request was read, kept only for stages.on()
        self.read_at: float | None = None  # that of the request being handled
        self.outbox: list = []  # response buffers not yet handed to the transport
        self.outbox_bytes = 0
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self.busy = False
        self.parked_fetch: asyncio.Task | None = None  # dropped if the connection closes first
        # from the oldest delayed Produce still waiting for its replicas on: one slot per request, [what sends
        # its answer once known, the bytes of the Produce it holds]; answers go out from the front, in the
        # order of the requests
        self.unanswered: deque[list] = deque()
        self.unanswered_bytes = 0
        self.answers_scheduled = False  # _answers_ready is to run: delayed Produces were answered this turn
        self.write_paused = False
        self.read_paused = False
        self.closed = False
        self.follower = -1  # the node id of the follower whose replica fetcher this connection is

    # ---- transport callbacks -----------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if not self.quotas.admit(peer[0] if peer else "", self.listener.name):
            self.closed = True
            transport.abort()
            return
        if self.quotas.over_limit:  # a connection of the protected listener: another makes room
            _close_least_recently_active(self.registry, self.quotas.protected_listener)
        self.ip = peer[0] if peer else ""
        delay = self.quotas.creation_delay()
        if delay > 0:  # max.connection.creation.rate: its requests wait until its turn
            self._mute(delay)
        self.registry.add(self)
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = f"/{peer[0]}" if peer else ""
        authenticator = None
        if self.listener.sasl:
            authenticator = sasl.SaslServer(self.listener.sasl_settings, self.broker.scram_credentials)
            # nothing big before authentication (Kafka's sasl.server.max.receive.size)
            self.decoder.max_size = min(self.decoder.max_size, self.broker.config["sasl.server.max.receive.size"])
        self.session = Session(self.listener, peer[0] if peer else "", self.peer, authenticator)
        if self.listener.security_protocol == "SSL":
            subject = tls.principal_name(transport.get_extra_info("peercert"))
            if subject is not None:
                self.session.principal = "User:" + subject

    def connection_lost(self, exc):
        if self.follower >= 0 and not self.closed:  # closed by the follower's end: perhaps its crash
            self.broker.store.peer_connection_failed(self.follower, exc or EOFError("connection closed"))
        if self.ip is not None:
            self.quotas.release(self.ip)
            self.ip = None
        self.registry.discard(self)
        self.closed = True
        self.queue.clear()
        self.read_times.clear()
        self._hold_queue_places()
        self.request_queue.forget(self)
        if self.parked_fetch is not None:
            self.parked_fetch.cancel()  # nobody is left to answer; Kafka drops it too
        if self.session is not None:
            self.broker.share.partitions.connection_closed(self.session)

    def pause_writing(self):
        self.write_paused = True
        self._update_reading()

    def resume_writing(self):
        self.write_paused = False
        self._update_reading()
        self._process()

    @property
    def muted(self) -> bool:
        return self.muted_until > 0

    def _mute(self, seconds: float) -> None:
        """Read and handle nothing more for ``seconds`` (Kafka mutes a throttled channel, KIP-219)."""
        if seconds <= 0:
            return
        if clock.monotonic() + seconds > self.muted_until:
            self.muted_until = clock.monotonic() + seconds
            clock.call_later(seconds, self._unmute)

    def _unmute(self):
        if not self.muted:
            return
        left = self.muted_until - clock.monotonic()
        if left > 0.001:  # muted longer since (or the timer came a little early): wait out the rest
            clock.call_later(left, self._unmute)
            return
        self.muted_until = 0.0
        self._process()

    def get_buffer(self, sizehint):
        return self.decoder.get_buffer()  # requests are read in place (FrameDecoder)

    def buffer_updated(self, nbytes):
        self.last_active = clock.monotonic()
        self.read_granted = False
        try:
            frames = self.decoder.buffer_updated(nbytes)
        except FrameError as exc:
            self.close(f"bad frame: {exc}")
            return
        self.queue.extend(frames)
        if frames and stages.on():
            self.read_times.extend([clock.monotonic()] * len(frames))
        self._process()

    # ---- request processing ---------------------------------------------------

    def room_available(self) -> None:
        """This connection waited longest for the request queue, and a place came free: it reads once."""
        self.read_granted = True
        self._update_reading()

    @property
    def _can_handle(self) -> bool:
        return not (self.busy or self.closed or self.write_paused or self.muted
                    or len(self.unanswered) >= _UNANSWERED_LIMIT or self.unanswered_bytes >= _UNANSWERED_BYTES)

    def _hold_queue_places(self) -> None:
        """Queued requests hold places in the broker's request queue only while this connection could
        handle them, and only those of its next turn: the rest, and any behind a request in progress, a
        throttle or a full send buffer, wait for the connection, not for the broker (Kafka leaves them
        in the socket), and the connection reads nothing more meanwhile."""
        wanted = min(len(self.queue), _REQUESTS_PER_TURN) if self._can_handle else 0
        if wanted > self.held:
            self.request_queue.hold(wanted - self.held)
        elif wanted < self.held:
            self.request_queue.release(self.held - wanted)
        self.held = wanted

    def _update_reading(self):
        if self.closed:
            return
        self._hold_queue_places()
        want_pause = self.write_paused or self.muted or bool(self.queue)
        if not want_pause and self.request_queue.full and not self.read_granted:
            want_pause = True
            self.request_queue.wait(self)
        else:
            self.request_queue.forget(self)
        if want_pause and not self.read_paused:
            self.transport.pause_reading()
            self.read_paused = True
        elif not want_pause and self.read_paused:
            self.transport.resume_reading()
            self.read_paused = False

    def _process(self):
        self.turn_scheduled = False
        for _ in range(_REQUESTS_PER_TURN):
            if not self.queue or not self._can_handle:
                break
            frame = self.queue.popleft()
            self.read_at = self.read_times.popleft() if self.read_times else None
            if self.held:  # its place is free once its handling starts
                self.held -= 1
                self.request_queue.release(1)
            self._guarded(self._handle, frame)
        if self.queue and self._can_handle and not self.turn_scheduled:  # the rest after the others' turns
            self.turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._process)
        self._flush()
        self._update_reading()

    def _guarded(self, step, *args) -> None:
        """A step of handling a request: bad input closes the connection, a bug too, with a log line."""
        try:
            step(*args)
        except (FrameError, codec.DecodeError) as exc:
            self.close(f"malformed request: {exc}")
        except Exception:
            log.exception("handler failed; closing connection from %s", self.peer)
            self.close("internal error")

    def _handle(self, frame):
        header = decode_request_header(frame)
        header.client_host = self.client_host
        header.read_at = self.read_at
        header.session = session = self.session
        handler = HANDLERS.get(header.api_key)
        if handler is None:
            raise FrameError(f"unknown API key {header.api_key}")
        before_authentication = not session.authenticated
        if before_authentication and not handler.before_authentication:
            self.close(f"{handler.name} request before SASL authentication")
            return
        if session.expires_at is not None and clock.monotonic() > session.expires_at \
                and not handler.reauthenticates:
            self.close(f"{handler.name} request after the SASL session of {session.principal} expired "
                       "(connections.max.reauth.ms) without re-authentication")
            return
        version = header.api_version
        if not handler.min_version <= version <= handler.max_version:
            if handler.unsupported_version is not None:
                # answered in v0 form so the client can pick a version we serve
                self._in_order(lambda: self.send(handler.name, 0, header.correlation_id,
                                                 handler.unsupported_version()))
                return
            raise FrameError(f"{handler.name} v{version} is not supported")
        if len(frame) >= _LARGE_REQUEST_BYTES:
            self.busy = True
            self.broker.supervisor.spawn(self._handle_large(handler, header, frame, before_authentication))
            return
        request, _ = codec.decode(handler.name + "Request", version, frame, header.body_offset)
        self._dispatch(handler, header, frame, request, before_authentication)

    def _dispatch(self, handler, header, frame, request, before_authentication: bool) -> None:
        session = self.session
        if self.broker.authorizer.enabled:
            refusal = authorization.gate(self.broker.authorizer, handler.acl, request, header)
            if refusal is authorization.CLOSE:
                self.close(f"{handler.name} from {session.principal} refused: only super users may send it")
                return
            if refusal is not None:
                self._in_order(lambda: self._reply(handler.name, header, refusal, (len(frame), 0.0)))
                return
        if handler.follower_id is not None and self.follower < 0:
            self.follower = handler.follower_id(request)
        started = time.perf_counter()
        result = handler.handle(self.broker, request, header)
        usage = (len(frame), time.perf_counter() - started)  # what client quotas count of this request
        if isinstance(result, DelayedProduce) and len(frame) < _LARGE_REQUEST_BYTES:
            slot = [None, len(frame)]
            self.unanswered.append(slot)
            self.unanswered_bytes += len(frame)
            result.start(lambda response: self._produce_answered(header, response, request, started, usage, slot))
            return
        if inspect.isawaitable(result) or len(frame) >= _LARGE_REQUEST_BYTES:
            self.busy = True
            task = self.broker.supervisor.spawn(self._finish(handler.name, header, result, request, started, usage))
            if handler.parked:  # a joining group member's wait must end for the others, so not those
                self.parked_fetch = task
            return
        if self.broker.metrics:
            self.broker.metrics.request(handler.name, started, request, result)
        self._answer(handler.name, header, result, usage)
        if before_authentication or session.close_reason:
            self._after_sasl_request()

    async def _handle_large(self, handler, header, frame, before_authentication: bool) -> None:
        decoded = asyncio.get_running_loop().run_in_executor(
            None, codec.decode, handler.name + "Request", header.api_version, frame, header.body_offset)
        await asyncio.wait([decoded])
        self.busy = False
        if not self.closed:
            self._guarded(lambda: self._dispatch(handler, header, frame, decoded.result()[0], before_authentication))
        self._process()

    def _after_sasl_request(self) -> None:
        if self.session.close_reason and not self.busy:  # a delayed answer closes in _finish
            self.close(self.session.close_reason)
        elif self.session.authenticated:
            self.decoder.max_size = self.broker.config["socket.request.max.bytes"]

    async def _finish(self, name, header, awaitable, request, started, usage):
        try:
            result = await awaitable if inspect.isawaitable(awaitable) else awaitable
            if self.broker.metrics:
                self.broker.metrics.request(name, started, request, result)
            if not self.closed and usage[0] >= _LARGE_REQUEST_BYTES and result is not None:
                throttle = self._throttle(name, header, result, usage)
                chunks = await asyncio.get_running_loop().run_in_executor(
                    None, response_chunks, name, header.api_version, header.correlation_id, result)
                self._in_order(lambda: self._send_chunks(chunks))
                self._mute(throttle / 1000)
            elif not self.closed:
                self._answer(name, header, result, usage)
            if self.session.close_reason:  # a failed authentication, answered after its delay
                self.close(self.session.close_reason)
        except Exception:
            log.exception("%s handler failed; closing connection from %s", name, self.peer)
            self.close("internal error")
        finally:
            self.busy = False
            self.parked_fetch = None
        self._process()

    def _produce_answered(self, header, response: dict, request, started, usage, slot: list) -> None:
        """A delayed Produce's replicas have its batches (or it failed): its answer goes out after those in
        front of it, written with the others the same high watermark move completed."""
        try:
            if self.broker.metrics:
                self.broker.metrics.request("Produce", started, request, response)
            slot[0] = lambda: self._answer_now("Produce", header, response, usage)
        except Exception:  # (not raised into the high watermark's move that called this)
            log.exception("Produce handler failed; closing connection from %s", self.peer)
            slot[0] = lambda: self.close("internal error")
        self._guarded(self._send_ready)
        if self.outbox:  # written at the end of the high watermark's move, or else on the next turn
            self.broker.replicas.answered.add(self)
        if not self.answers_scheduled:
            self.answers_scheduled = True
            asyncio.get_running_loop().call_soon(self._answers_ready)

    def _answers_ready(self) -> None:
        """The connection's turn after delayed Produces were answered: the requests their answers held
        back, if it owed too many."""
        self.answers_scheduled = False
        if not self.closed:
            self._process()

    def write_answers(self) -> None:
        if not self.closed:
            self._flush()

    def _in_order(self, send) -> None:
        """``send`` now, or once the answers owed in front of it are out."""
        if self.unanswered:
            self.unanswered.append([send, 0])
        else:
            send()

    def _send_ready(self) -> None:
        while self.unanswered and self.unanswered[0][0] is not None:
            send, size = self.unanswered.popleft()
            self.unanswered_bytes -= size
            send()

    def _answer(self, name: str, header, result: dict | None, usage: tuple[int, float]) -> None:
        if self.unanswered:
            self.unanswered.append([lambda: self._answer_now(name, header, result, usage), 0])
        else:
            self._answer_now(name, header, result, usage)

    def _answer_now(self, name: str, header, result: dict | None, usage: tuple[int, float]) -> None:
        """Reply, unless the lost-acknowledgement fault hook closes the connection instead
        (also after an acks=all wait: the records are then on the in-sync replicas)."""
        if result is not None and self.drop_response(name):
            self.close(f"fault injection ({faults.DROP_RESPONSE_ENV}): {name} response dropped")
        else:
            self._reply(name, header, result, usage)
            if name == "Produce" and result is not None and stages.on():
                stages.produce_answered(result)

    def _reply(self, name: str, header, result: dict | None, usage: tuple[int, float]) -> None:
        """Send the answer (None: none, Produce with acks=0) with the throttle time client quotas give,
        and mute the connection for that long."""
        throttle = self._throttle(name, header, result, usage)
        if result is not None:
            self.send(name, header.api_version, header.correlation_id, result)
        self._mute(throttle / 1000)

    def _throttle(self, name: str, header, result: dict | None, usage: tuple[int, float]) -> int:
        """The throttle time (ms) client quotas give this request, set in its answer."""
        throttle = client_quota_throttle(self.broker.quotas, name, header, result, *usage)
        if result is not None and "throttle_time_ms" in result:
            throttle = result["throttle_time_ms"] = max(result["throttle_time_ms"], throttle)
        return throttle

    def send(self, name: str, version: int, correlation_id: int, body: dict) -> None:
        # collected and written once per pass over the queue: one socket write for
        # many pipelined responses is most of the per-request cost saved
        if not self.closed:
            self._send_chunks(response_chunks(name, version, correlation_id, body))

    def _send_chunks(self, chunks: list) -> None:
        if not self.closed:
            self.outbox.extend(chunks)
            self.outbox_bytes += sum(map(len, chunks))
            if self.outbox_bytes >= _OUTBOX_LIMIT:
                self._flush()

    def _flush(self) -> None:
        if self.outbox:
            self.last_active = clock.monotonic()
            self.transport.writelines(self.outbox)
            self.outbox = []
            self.outbox_bytes = 0

    def close(self, reason: str) -> None:
        if not self.closed:
            self._flush()  # answers to the requests before the bad one still go out
            log.warning("closing connection from %s: %s", self.peer, reason)
            self.closed = True
            self.queue.clear()
            self.read_times.clear()
            self._hold_queue_places()
            self.transport.close()


def bind_socket(host: str, port: int, what: str, listen: bool = False) -> socket.socket:
    """A TCP socket bound (listening later, or at once with ``listen``) to host:port; ConfigError names
    ``what`` when that fails. Two sockets with SO_REUSEADDR may bind one port while neither listens: only
    a listening one holds it against another process's bind."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise ConfigError(f"{what}: cannot resolve host {host!r} ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        if listen:
            sock.listen(_LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"{what}: cannot bind ({exc.strerror})") from None
    return sock


def bind_listeners(listeners: list[Listener]) -> dict[Listener, socket.socket]:
    """Bind every listener's socket before the logs load, so a port in use or a host that does not
    resolve stops the broker at once (ConfigError) instead of after recovery."""
    bound: dict[Listener, socket.socket] = {}
    try:
        for listener in listeners:
            bound[listener] = bind_socket(listener.host, listener.port, f"listener {listener}")
    except ConfigError:
        for sock in bound.values():
            sock.close()
        raise
    return bound


async def serve(broker: Broker, stop: asyncio.Event, bound: dict[Listener, socket.socket],
                metrics_socket: socket.socket | None = None) -> None:
    loop = asyncio.get_running_loop()
    servers = []
    connections: set[KafkaConnection] = set()
    if broker.config["etcd.connect"]:
        # a registered broker never refuses its peers (failure_detector.py): new connections wait in the
        # backlog while it joins
        for listener, sock in bound.items():
            if listener.name == inter_broker_listener(broker.config):
                sock.listen(_LISTEN_BACKLOG)
    if not await _opened_unless_stopped(broker, stop):
        return
    broker.groups.start()
    broker.transactions.start(InterBrokerChannel(broker, f"broker-{broker.node_id}-txn-marker-sender"))
    broker.share.persister.channel = InterBrokerChannel(broker, f"broker-{broker.node_id}-share-persister")
    broker.txn_verifier = TransactionVerifier(broker)
    drop_response = faults.response_dropper()
    if drop_response.every:
        log.warning("fault injection: dropping every %dth Produce response", drop_response.every)
    if broker.kill_after_marker.after:
        log.warning("fault injection: killing the broker after transaction marker %d", broker.kill_after_marker.after)
    if broker.fail_marker.count:
        log.warning("fault injection: the first %d transaction markers fail", broker.fail_marker.count)
    supervisor = broker.supervisor
    faults.start_cancellation_ignorer(supervisor)
    tasks = []
    if metrics_socket is not None:
        broker.metrics = BrokerMetrics(broker, connections)
        servers.append(await broker.metrics.serve(metrics_socket))
        tasks.append(supervisor.start("event-loop-lag-sampler", broker.metrics.sample_loop_lag))
    quotas = broker.connection_quotas = ConnectionQuotas(
        broker.config, broker.budget.connections if broker.budget else None, broker.quotas,
        inter_broker_listener(broker.config) if len(bound) > 1 else None)
    request_queue = RequestQueue(broker.config["queued.max.requests"])
    for listener, sock in bound.items():
        def connection(listener=listener):
            return KafkaConnection(broker, listener, connections, drop_response, quotas, request_queue)

        if listener.tls:
            broker.tls_contexts.contexts[listener.name] = listener.ssl_context

            def set_up(client, address, connection=connection, name=listener.name):  # the context of the moment
                return tls.handshake(loop, client, address, broker.tls_contexts.contexts[name], connection)
        else:
            def set_up(client, address, connection=connection):
                return _connect_accepted(loop, client, connection)
        try:
            sock.listen(_LISTEN_BACKLOG)
        except OSError as exc:  # another process listens there (both bound it with SO_REUSEADDR): stop, once
            raise ConfigError(f"listener {listener}: cannot listen on port {listener.port} ({exc.strerror})") from None
        servers.append(_Acceptor(sock, supervisor.start(f"data-plane-kafka-socket-acceptor-{listener.name}",
                                                        lambda sock=sock, name=listener.name, set_up=set_up:
                                                        _accept(sock, name, quotas, set_up, supervisor))))
        log.info("listening on %s (%s)", listener, listener.security_protocol)
    broker.tls_contexts.restore()  # before the first accept runs: no connection gets a store since replaced
    tasks.append(supervisor.start("connections-max-idle", lambda: _close_idle_connections(broker, connections)))
    tasks.append(supervisor.start("kafka-log-flusher", lambda: _flush_periodically(broker)))
    tasks.append(supervisor.start("PeriodicProducerExpirationCheck", lambda: _expire_producers_periodically(broker)))
    tasks.append(supervisor.start("kafka-log-retention", lambda: _apply_retention_periodically(broker)))
    tasks.append(supervisor.start("share-group-timers", broker.share.run_timers))
    if broker.config["log.cleaner.enable"]:
        tasks.append(supervisor.start("kafka-log-cleaner-thread", _log_cleaner(broker)))
    try:
        await stop.wait()
    finally:
        for task in tasks:
            task.cancel()
        await broker.close()  # while still serving: the new leaders' followers may fetch the rest from here
        for server in servers:
            server.close()
        for conn in list(connections):
            conn.transport.close()
        for server in servers:
            await server.wait_closed()
        supervisor.stop_all()  # what is left: coordinator loads, marker senders, requests' own tasks


async def _opened_unless_stopped(broker: Broker, stop: asyncio.Event) -> bool:
    """broker.open(), unless a SIGTERM/SIGINT comes first: joining a cluster may wait (for etcd, for an
    earlier run's session to expire) and a signal must not wait with it. False: stopped, the session ended."""
    opening = asyncio.ensure_future(broker.open())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({opening, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if opening.done():
        opening.result()  # its exception (etcd unreachable, a node.id in use) stops the broker
        return True
    opening.cancel()
    try:
        await within(10, broker.store.stop(controlled=False), "leaving etcd")
    except Exception as exc:  # noqa: BLE001 -- stopping anyway: whatever leaving etcd raised is only logged
        log.warning("stopped while joining the cluster: %s", exc)
    return False


def _close_least_recently_active(connections: set[KafkaConnection], protected_listener: str) -> None:
    """max.connections with a protected listener's connection over it: Kafka closes the client connection
    of another listener that was active least recently."""
    others = [c for c in connections if c.listener.name != protected_listener and not c.closed]
    if others:
        min(others, key=lambda c: c.last_active).close(
            "max.connections reached: closed to make room for an inter-broker connection")


async def _accept(sock: socket.socket, listener: str, quotas: ConnectionQuotas, set_up, supervisor) -> None:
    """A listener's acceptor: accepts connections until cancelled, each set up (``set_up``: a coroutine
    making its KafkaConnection, after a TLS handshake on a TLS listener) on its own. At
    max.connections it waits for one to close before accepting the next, as Kafka's acceptor does: a new
    client's connection waits in the listen backlog, neither answered nor refused, until a place frees
    or the client's own timeout gives up (Kafka's clients: request.timeout.ms, librdkafka's
    socket.timeout.ms)."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    while True:
        await quotas.wait_for_slot(listener)
        try:
            client, address = await loop.sock_accept(sock)
        except OSError as exc:  # out of file descriptors: keep serving the connections there are
            log.error("accept failed on %s: %s", sock.getsockname(), exc)
            await clock.sleep(0.1)
            continue
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        quotas.setting_up += 1
        supervisor.spawn(_counted_set_up(quotas, set_up(client, address)))


async def _counted_set_up(quotas: ConnectionQuotas, setting_up) -> None:
    try:
        await setting_up
    finally:
        quotas.set_up_done()


async def _connect_accepted(loop, client: socket.socket, connection) -> None:
    try:
        await loop.connect_accepted_socket(connection, client)
    except OSError as exc:  # the client went away before its connection was set up
        log.debug("accepted connection lost at once: %s", exc)
        client.close()


class _Acceptor:
    """A listener's socket and its accept loop, closed like an asyncio Server."""

    def __init__(self, sock: socket.socket, accepting: asyncio.Future):
        self.sock = sock
        self.accepting = accepting

    def close(self) -> None:
        self.accepting.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        pass


async def _close_idle_connections(broker: Broker, connections: set[KafkaConnection]) -> None:
    """connections.max.idle.ms: close a connection that neither sent nor got anything for that long
    (a request in progress, such as a long-polling Fetch, keeps it open)."""
    idle_s = broker.config["connections.max.idle.ms"] / 1000
    while True:
        await clock.sleep(min(max(idle_s / 4, 0.05), 30))
        now = clock.monotonic()
        for conn in [c for c in connections if not c.busy and now - c.last_active > idle_s]:
            conn.close(f"idle for more than connections.max.idle.ms ({idle_s * 1000:.0f} ms)")


async def _flush_periodically(broker: Broker) -> None:
    """Drives flush.ms; without a broker default, once a second (a topic's own, or a default set at run time,
    may ask for it)."""
    failing = False
    while True:
        await clock.sleep(0.1 if broker.config["log.flush.interval.ms"] is not None else 1.0)
        try:
            broker.logs.flush_if_due(clock.wall_ms())
            failing = False
        except OSError as exc:  # a full disk: flushing must resume once there is space again
            if not failing:
                log.error("flush failed: %s; retrying", exc)
            failing = True


async def _expire_producers_periodically(broker: Broker) -> None:
    """Drives producer.id.expiration.ms, checking every producer.id.expiration.check.interval.ms."""
    while True:
        await clock.sleep(broker.config["producer.id.expiration.check.interval.ms"] / 1000)
        broker.remove_expired_producers(clock.wall_ms())


async def _apply_retention_periodically(broker: Broker) -> None:
    """Drives retention.ms / retention.bytes, checking every log.retention.check.interval.ms."""
    while True:
        await clock.sleep(broker.config["log.retention.check.interval.ms"] / 1000)
        try:
            broker.delete_old_segments(clock.wall_ms())
        except OSError as exc:
            log.error("retention failed: %s; retrying at the next check", exc)


def _log_cleaner(broker: Broker):
    """The log cleaner's runs: log.cleaner.threads threads each, each cleaning the log most in need, off the
    event loop. A run after a failed one starts once the passes of the failed one have stopped."""
    threads = broker.config["log.cleaner.threads"]
    # a cleaner thread holding the GIL keeps the event loop waiting up to this long: 5 ms by default
    sys.setswitchinterval(CLEANER_SWITCH_INTERVAL_S)
    pools: list[ThreadPoolExecutor] = []  # the last run's

    async def run() -> None:
        if pools:
            await asyncio.get_running_loop().run_in_executor(None, pools.pop().shutdown)
        broker.cleaner.stopped.clear()
        pool = ThreadPoolExecutor(threads, thread_name_prefix="log-cleaner")
        pools.append(pool)
        try:
            async with asyncio.TaskGroup() as cleaners:  # one failing stops the others
                for _ in range(threads):
                    cleaners.create_task(_clean_one_at_a_time(broker, pool))
        finally:
            broker.cleaner.stopped.set()  # a pass under way stops at its next read or write
            pool.shutdown(wait=False)

    return run


async def _clean_one_at_a_time(broker: Broker, pool: ThreadPoolExecutor) -> None:
    loop = asyncio.get_running_loop()
    while True:
        plan = broker.cleaner.choose(clock.wall_ms())
        if plan is None:
            await clock.sleep(broker.config["log.cleaner.backoff.ms"] / 1000)  # a dynamic broker config
            continue
        (topic, partition), started = plan.key, clock.monotonic()
        log.info("cleaning %s-%d below offset %d (dirty from %d): %d segment(s)",
                 topic, partition, plan.end, plan.first_dirty, len(plan.sources))
        try:
            await loop.run_in_executor(pool, broker.cleaner.clean, plan)
            swapped = broker.cleaner.swap(plan)
        except (asyncio.CancelledError, CleaningStopped):
            broker.cleaner.discard(plan)
            raise
        except (OSError, CorruptRecord) as exc:
            broker.cleaner.discard(plan)
            log.error("cleaning %s-%d failed: %s; its segments stay as they were", topic, partition, exc)
            await clock.sleep(broker.config["log.cleaner.backoff.ms"] / 1000)
            continue
        log.info("cleaned %s-%d below offset %d: %d segment(s) rewritten, %d record(s) removed, "
                 "%.1f MB read, %.1f MB written in %.1f s", topic, partition, plan.end, swapped,
                 plan.records_removed, plan.bytes_read / 1e6, plan.bytes_written / 1e6, clock.monotonic() - started)
