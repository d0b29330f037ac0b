"""The compose files' console service: built from the Dockerfile's console stage (which installs the console
extra), its arguments the ones `moldau console` takes, pointed at the brokers' INTERNAL listeners."""

from __future__ import annotations

import argparse

import yaml

from broker.console import command
from test_docker import DOCKER, stages


def test_compose_files_run_the_console_against_their_brokers():
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers(dest="command"))
    stage = stages()["console"]
    assert ("RUN", "pip install --no-cache-dir '.[console]'") in stage
    assert ("ENTRYPOINT", '["moldau", "console"]') in stage
    for name, brokers in (("docker-compose.yml", ["moldau"]),
                          ("docker-compose.cluster.yml", ["moldau-1", "moldau-2", "moldau-3"])):
        services = yaml.safe_load((DOCKER / name).read_text())["services"]
        console = services["console"]
        assert console["build"]["target"] == "console"
        args = parser.parse_args(["console", *console["command"]])
        assert args.bootstrap_server.split(",") == [f"{b}:29092" for b in brokers]
        assert args.host == "0.0.0.0" and f"{args.port}:{args.port}" in console["ports"]
        assert all(services[broker]["hostname"] == broker for broker in brokers)
