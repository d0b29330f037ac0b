"""docker/: no container engine runs here, so the image's build is replayed instead.

The Dockerfile's COPY steps are applied to a directory the way Docker would (the build context
filtered by .dockerignore), its `pip install` runs in a clean venv, and the broker installed there
is started with the image's CMD (two listeners) and driven through the listener the host would use.
Where podman or buildah can build, the image is built for real.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers.kafka import create_topic, make_messages, produce_all, read_partitions

from conftest import free_port, port_accepts

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
BROKER_STAGE = "broker"


def stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its (INSTRUCTION, arguments) in order."""
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    result: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, args = line.split(None, 1)
        if op.upper() == "FROM":
            current = result.setdefault(args.split()[-1], [])
        current.append((op.upper(), args))
    return result


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore matching, for the patterns this repository uses."""
    parts = path.split("/")
    for pattern in patterns:
        pattern = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch("/".join(parts[:i]), pattern) for i in range(1, len(parts) + 1)):
            return True
        if any(fnmatch.fnmatch(part, pattern) for part in parts) and "/" not in pattern:
            return True
    return False


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def build_context() -> list[str]:
    """Files Docker would send as the build context: the checkout minus .dockerignore."""
    patterns = dockerignore()
    files = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames if not ignored(os.path.normpath(os.path.join(rel_dir, d)), patterns)]
        files += [os.path.normpath(os.path.join(rel_dir, f)) for f in filenames
                  if not ignored(os.path.normpath(os.path.join(rel_dir, f)), patterns)]
    return files


def replay_copies(stage: list[tuple[str, str]], destination: Path) -> None:
    """The stage's COPY steps, from the filtered build context into ``destination`` (its WORKDIR)."""
    context = set(build_context())
    for op, args in stage:
        if op != "COPY":
            continue
        *sources, target = shlex.split(args)
        for source in sources:
            copied = [f for f in context if f == source or f.startswith(source + "/")]
            assert copied, f"COPY {source}: not in the build context"
            for f in copied:
                if f != source:  # a directory's files land under the target
                    out = destination / target / Path(f).relative_to(source)
                else:  # a file: into the target directory, or as the target
                    out = destination / target / Path(f).name if target.endswith("/") else destination / target
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, out)


def cmd_overrides(stage: list[tuple[str, str]]) -> dict[str, str]:
    cmd = json.loads(dict(stage)["CMD"])
    return dict(cmd[i + 1].split("=", 1) for i in range(0, len(cmd), 2) if cmd[i] == "--override")


def test_the_image_copies_what_pyproject_packages():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]} | {
        "pyproject.toml", pyproject["project"]["readme"]}
    copied = {source for op, args in stages()[BROKER_STAGE] if op == "COPY" for source in shlex.split(args)[:-1]}
    assert needed <= copied, f"pip install . needs {sorted(needed - copied)}"


def test_build_context_leaves_out_venv_data_and_tests():
    context = build_context()
    assert "pyproject.toml" in context and "broker/network/server.py" in context
    for unwanted in (".venv/", ".git/", "tests/", "moldau-data/", "bench/results/"):
        assert not [f for f in context if f.startswith(unwanted)], unwanted
    assert not [f for f in context if "__pycache__" in f or f.endswith(".pyc")]


@pytest.mark.timeout(400)
def test_image_installs_in_a_clean_venv_and_serves_the_host_through_its_external_listener(tmp_path):
    broker_stage = stages()[BROKER_STAGE]
    workdir = tmp_path / dict(broker_stage)["WORKDIR"].lstrip("/")
    replay_copies(broker_stage, workdir)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip_steps = [step.strip() for op, args in broker_stage if op == "RUN" for step in args.split("&&") if "pip install" in step]
    assert pip_steps == ["pip install --no-cache-dir ."]
    install = subprocess.run([str(venv / "bin" / "python"), "-m", *shlex.split(pip_steps[0])], cwd=workdir,
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, check=True).stdout.lower()
    assert "prometheus-client" in installed or "prometheus_client" in installed
    for test_only in ("pyspark", "pytest", "confluent-kafka"):  # the broker image stays lean
        assert test_only not in installed

    # the image's CMD, with its addresses moved to this host's loopback and free ports
    overrides = cmd_overrides(broker_stage)
    external, internal, metrics = free_port(), free_port(), free_port()
    ports = {"9092": str(external), "29092": str(internal), "9308": str(metrics)}
    for name, value in overrides.items():
        value = value.replace("0.0.0.0", "127.0.0.1")
        overrides[name] = re.sub(r"\b(9092|29092|9308)\b", lambda m: ports[m.group(1)], value)
    overrides["log.dirs"] = str(tmp_path / "data")
    assert "moldau:" + str(internal) in overrides["advertised.listeners"]  # other containers' name for it
    command = [str(venv / "bin" / "moldau"), "serve"]
    for name, value in overrides.items():
        command += ["--override", f"{name}={value}"]
    with open(tmp_path / "broker.log", "wb") as log:
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not port_accepts(external):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "broker.log").read_text()
            time.sleep(0.2)
        # the host bootstraps through EXTERNAL and must be told localhost:<external>, not moldau:<internal>
        bootstrap = f"localhost:{external}"
        create_topic(bootstrap, "from-the-host", partitions=1)
        msgs = make_messages(100, 1)
        produce_all(bootstrap, "from-the-host", msgs)
        got, _ = read_partitions(bootstrap, "from-the-host", [0])
        assert [value for _, _, value, _, _ in got[0]] == [m.value for m in msgs]

        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as response:
            scraped = response.read().decode()
        families = set(re.findall(r"^# TYPE (\w+) ", scraped, re.M))
        used = {name for board in ("moldau-dashboard.json", "moldau-cluster-dashboard.json")
                for panel in json.loads((DOCKER / "grafana" / board).read_text())["panels"]
                for target in panel["targets"]
                for name in re.findall(r"\b((?:kafka|moldau|process)_\w+)", target["expr"])}
        assert used, "the dashboard queries no metric"
        missing = {n for n in used if n not in families and re.sub(r"_(bucket|count|sum)$", "", n) not in families}
        assert not missing, f"the dashboard uses metrics the broker does not serve: {sorted(missing)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(30) == 0, (tmp_path / "broker.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


def test_compose_runs_broker_smoke_test_pipeline_prometheus_and_grafana():
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    services = compose["services"]
    broker_stage = stages()[BROKER_STAGE]
    overrides = cmd_overrides(broker_stage)
    internal = dict(url.split("://") for url in overrides["advertised.listeners"].split(","))["INTERNAL"]

    moldau = services["moldau"]
    assert moldau["build"]["dockerfile"] == "docker/Dockerfile" and moldau["build"]["target"] == BROKER_STAGE
    assert (DOCKER / moldau["build"]["context"]).resolve() == ROOT
    assert moldau["hostname"] == internal.split(":")[0]
    external = dict(url.split("://") for url in overrides["advertised.listeners"].split(","))["EXTERNAL"]
    assert f"{external.split(':')[1]}:{external.split(':')[1]}" in moldau["ports"]  # published as advertised

    smoke = services["smoke-test"]
    assert smoke["environment"]["BOOTSTRAP_SERVERS"] == internal
    assert smoke["depends_on"]["moldau"]["condition"] == "service_healthy"
    mounted = smoke["volumes"][0].split(":")[0]
    compile((DOCKER / mounted).read_text(), "smoke_test.py", "exec")

    pipeline = services["pipeline"]
    assert pipeline["build"]["target"] in stages() and pipeline["build"]["target"] != BROKER_STAGE
    from pipeline.cli import parser
    for step in pipeline["command"][0].split("&&"):
        argv = shlex.split(step.replace("exec ", ""))
        assert argv[:2] == ["moldau", "pipeline"]
        args = parser().parse_args(argv[2:])  # the options exist
        assert args.bootstrap == internal

    prometheus = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == [f"{internal.split(':')[0]}:{overrides['metrics.port']}"]
    assert overrides["metrics.host"] == "0.0.0.0"
    grafana = services["grafana"]
    for volume in grafana["volumes"]:
        assert (DOCKER / volume.split(":")[0]).exists(), volume
    datasource = yaml.safe_load((DOCKER / "grafana/provisioning/datasources/prometheus.yml").read_text())
    dashboard = json.loads((DOCKER / "grafana/moldau-dashboard.json").read_text())
    uids = {panel["datasource"]["uid"] for panel in dashboard["panels"]}
    assert uids == {datasource["datasources"][0]["uid"]}


def base_release(image: str) -> str | None:
    """The Debian release a python image's tag pins (python:3.11-slim-bookworm: bookworm), None if unpinned."""
    tag = image.partition(":")[2]
    release = tag.rsplit("-", 1)[-1] if "-" in tag else ""
    return release if release.isalpha() and release not in ("slim", "alpine") else None


def host_debian_mirror() -> str | None:
    """The Debian archive this machine's apt uses (its own sources, so no registry is named here)."""
    sources = Path("/etc/apt/sources.list.d")
    for f in [Path("/etc/apt/sources.list"), *sorted(sources.glob("*.sources")), *sorted(sources.glob("*.list"))]:
        if not f.is_file():
            continue
        text = f.read_text()
        for stanza in text.split("\n\n"):  # deb822
            fields = dict(ln.split(":", 1) for ln in stanza.splitlines() if ":" in ln and not ln.startswith("#"))
            if "debian-archive-keyring" in fields.get("Signed-By", "") and "security" not in fields.get("Suites", ""):
                return fields["URIs"].split()[0]
        for line in text.splitlines():  # one-line style
            parts = line.split()
            if parts[:1] == ["deb"] and parts[-2:-1] != [] and [p for p in parts if p.rstrip("/").endswith("/debian")]:
                return next(p for p in parts if p.rstrip("/").endswith("/debian"))
    return None


def apt_packages() -> dict[str, list[str]]:
    """Base image -> the packages `apt-get install` adds in the stages built on it."""
    base_of: dict[str, str] = {}
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip().upper().startswith("FROM "):
            source, stage = line.split()[1], line.split()[-1]
            base_of[stage] = base_of.get(source, source)
    packages: dict[str, list[str]] = {}
    for stage, steps in stages().items():
        for op, args in steps:
            for step in args.split("&&") if op == "RUN" else []:
                words = shlex.split(step)
                if words[:2] == ["apt-get", "install"]:
                    packages.setdefault(base_of[stage], []).extend(w for w in words[2:] if not w.startswith("-"))
    return packages


def test_apt_packages_exist_in_the_base_images_debian_release(tmp_path):
    """Every package an `apt-get install` names is in the Debian release of the image it runs on (an unpinned
    python:3.11-slim moved from bookworm to trixie, which has no openjdk-17): resolved with apt against that
    release's package index, from the archive this machine's apt uses."""
    wanted = apt_packages()
    assert wanted, "the Dockerfile installs no apt package any more: drop this test"
    mirror = host_debian_mirror()
    if shutil.which("apt-get") is None or mirror is None:
        pytest.fail("no apt, or no Debian archive configured on this machine, to resolve the package names")
    for image, packages in wanted.items():
        release = base_release(image)
        assert release, f"{image}: pin the Debian release (e.g. python:3.11-slim-bookworm) its apt packages come from"
        root = tmp_path / release
        (root / "lists" / "partial").mkdir(parents=True)
        (root / "cache" / "archives" / "partial").mkdir(parents=True)
        (root / "status").write_text("")
        (root / "sources.list").write_text(
            f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {mirror} {release} main\n")
        host_lists = Path("/var/lib/apt/lists")
        # the host's own index of that release when it has one (no download), else the archive's
        lists = host_lists if list(host_lists.glob(f"*_dists_{release}_main_binary-*_Packages*")) else root / "lists"
        options = ["-o", f"Dir::Etc::SourceList={root / 'sources.list'}", "-o", f"Dir::Etc::SourceParts={root}",
                   "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={root / 'cache'}",
                   "-o", f"Dir::State::status={root / 'status'}", "-o", "Debug::NoLocking=1",
                   "-o", "APT::Sandbox::User=root", "-o", "Acquire::Languages=none"]
        if lists != host_lists:
            update = subprocess.run(["apt-get", *options, "-qq", "update"], capture_output=True, text=True,
                                    timeout=300)
            if update.returncode != 0:
                pytest.fail(f"the Debian archive did not answer for {release}: {update.stderr.strip()[-300:]}")
        for package in packages:
            found = subprocess.run(["apt-cache", *options, "show", "--no-all-versions", package],
                                   capture_output=True, text=True, timeout=60)
            assert found.returncode == 0 and f"Package: {package}" in found.stdout, \
                f"{image} ({release}) has no package {package}: {found.stderr.strip()}"


def test_cluster_compose_waits_for_a_healthy_etcd_restarts_brokers_and_is_monitored():
    compose = yaml.safe_load((DOCKER / "docker-compose.cluster.yml").read_text())
    services = compose["services"]
    etcd = services["etcd"]
    assert "etcdctl" in etcd["healthcheck"]["test"] and "health" in etcd["healthcheck"]["test"]
    brokers = {name: s for name, s in services.items() if name.startswith("moldau-")}
    assert len(brokers) == 3
    targets = []
    for _name, service in brokers.items():
        assert service["depends_on"]["etcd"]["condition"] == "service_healthy"
        assert service["restart"] in ("on-failure", "unless-stopped", "always")
        assert service["build"]["target"] in stages()
        overrides = dict(service["command"][i + 1].split("=", 1) for i in range(0, len(service["command"]), 2))
        assert overrides["metrics.host"] == "0.0.0.0"
        targets.append(f"{service['hostname']}:{overrides['metrics.port']}")
    prometheus_config = services["prometheus"]["volumes"][0].split(":")[0]
    prometheus = yaml.safe_load((DOCKER / prometheus_config).read_text())
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == targets
    assert services["prometheus"]["restart"] and services["grafana"]["restart"]
    mounted = [v.split(":")[0] for v in services["grafana"]["volumes"]]
    for path in mounted:
        assert (DOCKER / path).exists(), path
    assert "./grafana/moldau-cluster-dashboard.json" in mounted
    dashboard = json.loads((DOCKER / "grafana/moldau-cluster-dashboard.json").read_text())
    queried = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    for metric in ("underreplicatedpartitions", "offlinepartitionscount", "kafka_consumergroup_lag",
                   "totaltime_seconds_bucket", "isrshrinks_total", "isrexpands_total"):
        assert metric in queried, metric
    single = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())["services"]["moldau"]
    assert single["restart"] == "on-failure"


def _engine() -> list[str] | None:
    """A command that can build images here, if any."""
    for engine in ("podman", "buildah", "docker"):
        if shutil.which(engine) and subprocess.run([engine, "info"], capture_output=True, timeout=60).returncode == 0:
            return [engine, "build"] if engine != "buildah" else ["buildah", "bud"]
    return None


@pytest.mark.timeout(1200)
def test_the_image_builds_for_real_where_an_engine_runs():
    engine = _engine()
    if engine is None:
        pytest.skip("no container engine can build images on this machine (podman, buildah, docker)")
    result = subprocess.run([*engine, "-f", "docker/Dockerfile", "--target", BROKER_STAGE, "-t", "moldau-test", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=1100)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
