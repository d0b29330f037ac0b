"""console.port on `moldau serve`: the web console as a child process, restarted when it exits.

A child, not a task in the broker's event loop: a page that renders slowly, a memory leak or a crash in the
web stack stays out of the broker. The broker binds the port (a port in use stops the broker at start, as
metrics.port does) and hands the socket to each child it starts; a child whose broker died stops by itself.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import socket
import sys

from ..config.broker_config import BrokerConfig, ConfigError
from ..network.listeners import Listener

log = logging.getLogger("moldau.console")

RESTART_DELAYS_S = (1, 2, 5, 10, 30)  # after the first, second, ... exit in a row; the last repeats
STABLE_S = 60  # a child that ran this long starts the count of exits again
STOP_TIMEOUT_S = 5


def check(config: BrokerConfig) -> None:
    """ConfigError when console.port is set but the console cannot run here."""
    missing = [m for m in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"console.port needs the console's dependencies (pip install 'moldau[console]'); "
                          f"missing: {', '.join(missing)}")


def command(config: BrokerConfig, listener: Listener, fd: int) -> list[str]:
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    argv = [sys.executable, "-m", "broker", "console", "--bootstrap-server", f"{host}:{listener.port}",
            "--fd", str(fd)]
    if config["console.command.config"]:
        argv += ["--command-config", config["console.command.config"]]
    return argv


async def supervise(config: BrokerConfig, listener: Listener, sock: socket.socket) -> None:
    """Run the console until cancelled, starting it again after each exit (a delay that grows while it keeps
    failing)."""
    sock.listen(128)
    argv = command(config, listener, sock.fileno())
    failures = 0
    while True:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            child = await asyncio.create_subprocess_exec(*argv, pass_fds=(sock.fileno(),),
                                                         stdin=asyncio.subprocess.DEVNULL)
        except OSError as exc:  # out of processes or memory: the broker goes on, the console is tried later
            code = exc.strerror
        else:
            try:
                code = await child.wait()
            except asyncio.CancelledError:
                await _stop(child)
                raise
        failures = 0 if loop.time() - started > STABLE_S else failures + 1
        delay = RESTART_DELAYS_S[min(failures, len(RESTART_DELAYS_S)) - 1] if failures else RESTART_DELAYS_S[0]
        log.warning("the web console exited with code %s; starting it again in %d s", code, delay)
        await asyncio.sleep(delay)


async def _stop(child: asyncio.subprocess.Process) -> None:
    if child.returncode is not None:
        return
    child.terminate()
    try:
        await asyncio.wait_for(child.wait(), STOP_TIMEOUT_S)
    except asyncio.TimeoutError:
        child.kill()
        await child.wait()
