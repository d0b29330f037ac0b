"""What every admin tool shares: --bootstrap-server and --command-config, and one line and exit code 1 for
anything that goes wrong (a bad argument, an unreachable cluster, a Kafka error). Requests time out after
request.timeout.ms of --command-config (default 30000), or kafka-consumer-groups' --timeout (ms)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Awaitable, Callable

from ..cluster import client_security
from ..config.broker_config import ConfigError, read_properties
from .client import AdminClient, AdminError


class UsageError(AdminError):
    """A bad combination of arguments."""


def one_line_errors(parser: argparse.ArgumentParser, tool: str) -> argparse.ArgumentParser:
    """argparse's complaints as one line, without the usage block (exit code 2, as argparse's)."""
    def error(message: str):
        print(f"moldau {tool}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)

    parser.error = error
    return parser


def tool_parser(sub, tool: str, help: str, description: str) -> argparse.ArgumentParser:
    """A tool's subcommand with one-line errors and the connection arguments."""
    parser = one_line_errors(sub.add_parser(tool, help=help, description=description), tool)
    add_connection_arguments(parser)
    return parser


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", metavar="HOST:PORT[,HOST:PORT]",
                        help="the brokers to connect to first (default %(default)s)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*, "
                             "request.timeout.ms")


def connect(args) -> AdminClient:
    """The client the arguments describe; UsageError for a bad --command-config or --bootstrap-server."""
    properties = {}
    if args.command_config:
        try:
            properties = read_properties(Path(args.command_config))
        except OSError as exc:
            raise UsageError(f"--command-config {args.command_config}: {exc.strerror}") from None
        except ConfigError as exc:
            raise UsageError(f"--command-config {exc}") from None
    try:
        security = client_security.from_properties(properties)
        timeout_ms = getattr(args, "timeout", None) or int(properties.get("request.timeout.ms", 30000))
    except ConfigError as exc:
        raise UsageError(f"--command-config {args.command_config}: {exc}") from None
    except ValueError:
        raise UsageError(f"--command-config {args.command_config}: request.timeout.ms is not a number") from None
    if timeout_ms <= 0:
        raise UsageError("the request timeout must be more than 0 ms")
    return AdminClient(args.bootstrap_server, security, timeout_s=timeout_ms / 1000)


def run(tool: str, args, work: Callable[[AdminClient], Awaitable[int | None]]) -> int:
    """Connect, run ``work`` and close; its failures become one line on stderr and exit code 1."""
    async def main() -> int:
        admin = connect(args)
        try:
            await admin.metadata([])  # an unreachable cluster fails here, before any output
            return await work(admin) or 0
        finally:
            admin.close()

    try:
        return asyncio.run(main())
    except AdminError as exc:
        return fail(tool, str(exc))


def fail(tool: str, message: str) -> int:
    print(f"moldau {tool}: {message}", file=sys.stderr)
    return 1
