"""The `moldau` command: `moldau serve [server.properties] [--override name=value]...`, and its tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import signal
import sys
from importlib.metadata import entry_points
from pathlib import Path

from storage.errors import LogDirInUse, StorageError
from storage.files import lock_directory

from . import __version__, shutdown
from .admin import (
    acls,
    cluster_describe,
    configs,
    consumer_groups,
    share_groups,
    topics,
    transactions,
)
from .admin import command as admin_command
from .cluster import stages
from .cluster.store import NodeIdInUse
from .config.broker_config import BrokerConfig, ConfigError, describe_settings
from .config.log_levels import apply_log_levels, log_levels_problem
from .console import child as console_child
from .console import command as console
from .network import descriptors

log = logging.getLogger("moldau")

# Kafka's admin tools, spoken over the Kafka protocol (broker/admin/)
ADMIN_TOOLS = {"topics": topics, "consumer-groups": consumer_groups, "share-groups": share_groups, "configs": configs,
               "acls": acls, "transactions": transactions}


def _serve(args) -> int:
    import uvloop

    from .broker import Broker
    from .network.listeners import resolve
    from .network.server import bind_listeners, bind_socket, serve

    try:
        config = BrokerConfig.load(Path(args.config) if args.config else None, args.override)
        listeners = resolve(config)  # before anything is written: a listener it cannot serve stops the broker
    except (ConfigError, OSError) as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 2
    if config["log.file"]:
        try:
            _log_to_file(Path(config["log.file"]))
        except OSError as exc:
            print(f"moldau: log.file: cannot write {config['log.file']} ({exc.strerror})", file=sys.stderr)
            return 2
    apply_log_levels(config["log.level"])
    if args.log_level:
        apply_log_levels(args.log_level)
    stages.watch_collections()
    for warning in config.warnings():
        log.warning("%s", warning)
    try:
        budget = descriptors.plan()
    except descriptors.OpenFileLimitTooLow as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 1
    try:
        # held until the process exits: a second broker on this directory would lose acknowledged data
        dir_lock = lock_directory(config.log_dir)
    except LogDirInUse as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file where the directory should be, no permission
        problem = {FileExistsError: "is a file, not a directory",
                   NotADirectoryError: "cannot be created: a part of its path is a file"}.get(
            type(exc), f"cannot be used ({exc.strerror})")
        print(f"moldau: {config.log_dir_setting}: {config.log_dir} {problem}", file=sys.stderr)
        return 2
    try:
        bound = bind_listeners(listeners)
        metrics_port = config["metrics.port"]
        metrics_socket = None if metrics_port is None else bind_socket(
            config["metrics.host"], metrics_port, "metrics.port", listen=True)
        console_socket = None
        if config["console.port"] is not None:
            console_child.check(config)
            console_socket = bind_socket(config["console.host"], config["console.port"], "console.port")
    except ConfigError as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 2
    try:
        broker = Broker(config, budget)
    except ConfigError as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"moldau: etcd.connect needs the etcd client (pip install 'moldau[cluster]'): {exc}", file=sys.stderr)
        return 2
    try:
        broker.start()
    except (OSError, StorageError) as exc:  # a full disk, a directory of another node.id
        print(f"moldau: cannot open {config.log_dir}: {exc}", file=sys.stderr)
        return 1

    async def run():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping(sig: signal.Signals) -> None:
            if not stop.is_set():
                log.info("%s: shutting down", sig.name)
                shutdown.arm_watchdog()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping, sig)
        if console_socket is not None:  # stopped with the broker's other supervised tasks
            broker.supervisor.start("web-console", lambda: console_child.supervise(config, listeners[0],
                                                                                   console_socket))
        await serve(broker, stop, bound, metrics_socket)

    try:
        shutdown.run(run(), uvloop.new_event_loop)
    except (ConnectionError, NodeIdInUse, ConfigError) as exc:  # etcd unreachable at start, a live broker of
        # this node.id, a listener another process took
        print(f"moldau: {exc}", file=sys.stderr)
        return 1
    finally:
        broker.shutdown()
        dir_lock.close()
        log.info("stopped; logs flushed and closed")
    return 0


def _log_to_file(path: Path) -> None:
    """The log goes to ``path`` instead of stderr; a WatchedFileHandler reopens it when logrotate moves it."""
    handler = logging.handlers.WatchedFileHandler(path)
    root = logging.getLogger()
    handler.setFormatter(root.handlers[0].formatter)
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)


def _log_levels_argument(text: str) -> str:
    problem = log_levels_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="moldau", description="A Kafka wire-protocol broker.")
    parser.add_argument("--version", action="version", version=f"moldau {__version__}")
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
    serve.add_argument("--log-level", type=_log_levels_argument, metavar="LEVEL[,logger=LEVEL...]",
                       help="log levels, log4j-style (INFO, or INFO,moldau.server=DEBUG); overrides log.level")
    for tool in ADMIN_TOOLS.values():
        tool.add_parser(sub)
    console.add_parser(sub)
    cluster = sub.add_parser(
        "cluster", help="try a cluster on one machine: `moldau cluster up`; `describe` or `check` a cluster",
        description="`up` starts an etcd and N brokers on 127.0.0.1 and watches them: a broker that exits is "
                    "reported and left down until `start N`; `stop N`, `restart N` (a controlled shutdown) and "
                    "`status`, from another terminal, act on the `up` of the same --data. Ctrl-C stops them all. "
                    "`describe`: a cluster's brokers, controller and partition health (--bootstrap-server, "
                    "--command-config). `check`: compare every broker's view of the cluster with etcd's keys "
                    "(exit 0: the same, 1: a broker differs, 2: unreadable).")
    cluster.add_argument("action", choices=["up", "status", "start", "stop", "restart", "describe", "check"])
    cluster.add_argument("node", nargs="?", type=int, help="a broker's node.id (start, stop, restart)")
    cluster_describe.add_arguments(cluster)  # describe and check: --bootstrap-server (and describe's --command-config)
    cluster.add_argument("--etcd", default="127.0.0.1:2379", help="check: etcd.connect (default %(default)s)")
    cluster.add_argument("--brokers", type=int, default=3, help="how many brokers (default %(default)s)")
    cluster.add_argument("--data", default="./moldau-cluster", help="data directory (default %(default)s)")
    cluster.add_argument("--port", type=int, default=9092, help="first broker's port (default %(default)s)")
    cluster.add_argument("--override", action="append", default=[], metavar="name=value",
                         help="a config value for every broker (repeatable)")
    plugins = {entry.name: entry.load() for entry in entry_points(group="moldau.commands")}
    for plugin in plugins.values():
        plugin.add_parser(sub)
    args, rest = parser.parse_known_args(argv)
    if args.command in plugins:
        return plugins[args.command].run(args, rest)
    if rest and (args.command in ADMIN_TOOLS or args.command == "cluster" and args.action == "describe"):
        tool = "cluster describe" if args.command == "cluster" else args.command
        return admin_command.fail(tool, f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return _serve(args)
    if args.command in ADMIN_TOOLS:
        return ADMIN_TOOLS[args.command].run(args)
    if args.command == "console":
        return console.run(args)
    if args.command == "cluster" and args.action == "describe":
        return cluster_describe.run(args)
    if args.command == "cluster" and args.action == "check":
        from .cluster import check

        return check.run(args.etcd, args.bootstrap_server)
    if args.command == "cluster":
        from .cluster.local_cluster import cluster_command, cluster_up

        if args.action == "up":
            return cluster_up(args.brokers, Path(args.data), args.port, args.override)
        return cluster_command(args.action, args.node, Path(args.data))
    return 2
