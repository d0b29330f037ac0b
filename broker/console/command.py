"""`moldau console --bootstrap-server HOST:PORT [--port 8080] [--host 127.0.0.1] [--command-config FILE]
[--allow-writes]`: the web console, served by uvicorn until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket

from ..admin import command
from ..admin.client import AdminError

log = logging.getLogger("moldau.console")

TOOL = "console"
PARENT_CHECK_S = 1.0


def add_parser(sub) -> None:
    parser = sub.add_parser(
        TOOL, help="the web console: cluster, topics, messages, consumer lag, transactions",
        description="Serve the web console for a Kafka cluster, which it reads with the Kafka protocol alone. "
                    "See docs/console.md.")
    command.add_connection_arguments(parser)
    parser.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                        help="how long a page waits for a broker that does not answer (default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port to serve on (default %(default)s)")
    parser.add_argument("--allow-writes", action="store_true",
                        help="offer actions that change the cluster (aborting a hanging transaction); without "
                             "it the console sends no request that changes anything")
    parser.add_argument("--max-transaction-timeout", type=float, default=15, metavar="MINUTES",
                        help="transactions whose producer wrote within this many minutes are never flagged "
                             "hanging (default %(default)s, as moldau transactions find-hanging)")
    parser.add_argument("--fd", type=int, help=argparse.SUPPRESS)  # a socket bound by `moldau serve` (console.port)


def run(args) -> int:
    try:
        import uvicorn
        import uvloop

        from .app import make_app
        from .client import ConsoleClient
    except ImportError as exc:
        return command.fail(TOOL, f"needs its web dependencies (pip install 'moldau[console]'): {exc}")
    if args.fd is None and not 0 < args.port < 65536:
        return command.fail(TOOL, f"--port {args.port}: not a port")
    if args.max_transaction_timeout < 0:
        return command.fail(TOOL, "--max-transaction-timeout must be 0 or more")
    try:
        base = command.connect(args)  # checks --bootstrap-server and --command-config
    except AdminError as exc:
        return command.fail(TOOL, str(exc))
    client = ConsoleClient(args.bootstrap_server, base.security, timeout_s=base.timeout_s,
                           allow_writes=args.allow_writes)
    app = make_app(client, args.bootstrap_server, int(args.max_transaction_timeout * 60_000))
    if args.fd is not None:
        sock = socket.socket(fileno=args.fd)
    else:
        try:
            sock = socket.create_server((args.host, args.port), reuse_port=False)
        except OSError as exc:
            return command.fail(TOOL, f"cannot serve on {args.host}:{args.port}: {exc.strerror}")
    server = uvicorn.Server(uvicorn.Config(app, loop="uvloop", http="h11", lifespan="off", log_level="warning",
                                           access_log=False, timeout_graceful_shutdown=2))

    async def serve() -> None:
        host, port = sock.getsockname()[:2]
        log.info("console for %s on http://%s:%d/ (%s)", args.bootstrap_server, host, port,
                 "writes allowed" if args.allow_writes else "read-only")
        watcher = asyncio.ensure_future(_exit_with_parent(server)) if args.fd is not None else None
        try:
            await server.serve(sockets=[sock])
        finally:
            if watcher is not None:
                watcher.cancel()
            client.close()

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


async def _exit_with_parent(server) -> None:
    """A console that `moldau serve` started ends with it, even when the broker was killed."""
    parent = os.getppid()
    while os.getppid() == parent:  # noqa: ASYNC110 -- no event tells of a parent's death; poll getppid
        await asyncio.sleep(PARENT_CHECK_S)
    log.warning("the broker that started this console is gone; stopping")
    server.should_exit = True

