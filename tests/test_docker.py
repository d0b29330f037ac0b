"""docker/ is for users (no engine here): check it by parsing, not by running."""

import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_dockerfile_copies_existing_paths_and_runs_moldau():
    instructions = dockerfile_instructions()
    assert instructions[0][0] == "FROM"
    for op, args in instructions:
        if op == "COPY":
            *sources, _dest = shlex.split(args)
            for src in sources:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
    entry = dict(instructions)["ENTRYPOINT"]
    assert '"moldau", "serve"' in entry
    packages = {"broker", "protocol", "storage"}
    copied = {shlex.split(a)[0] for op, a in instructions if op == "COPY"}
    assert packages <= copied


def test_compose_starts_broker_and_smoke_test():
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["moldau"]["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / "..").resolve() == (DOCKER / services["moldau"]["build"]["context"]).resolve()
    smoke = services["smoke-test"]
    assert smoke["depends_on"]["moldau"]["condition"] == "service_healthy"
    mounted = smoke["volumes"][0].split(":")[0]
    assert (DOCKER / mounted).exists()
    compile((DOCKER / mounted).read_text(), "smoke_test.py", "exec")
