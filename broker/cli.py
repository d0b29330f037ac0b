"""The `moldau` command: `moldau serve [server.properties] [--override name=value]...`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .config import BrokerConfig, ConfigError, describe_settings

log = logging.getLogger("moldau")


def _serve(args) -> int:
    import uvloop

    from .broker import Broker
    from .server import serve

    try:
        config = BrokerConfig.load(Path(args.config) if args.config else None, args.override)
    except (ConfigError, OSError) as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 2
    for name in config.unknown:
        log.warning("ignoring unknown config %s", name)
    broker = Broker(config)
    broker.start()

    async def run():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(broker, stop)

    try:
        uvloop.run(run())
    finally:
        broker.shutdown()
        log.info("stopped; logs flushed and closed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moldau", description="A Kafka wire-protocol broker.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the broker, like kafka-server-start.sh.",
        epilog="configuration names (Kafka's):\n" + describe_settings(),
    )
    serve.add_argument("config", nargs="?", help="a server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="name=value",
                       help="set one config value (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return _serve(args)
    return 2
