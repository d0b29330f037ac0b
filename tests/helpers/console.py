"""The web console as a process (`python -m broker console ...`) and headless Chromium (Debian's `chromium`,
driven by Playwright) to look at it. A missing Chromium or Playwright fails the test: `make test-deps`
installs both."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO_ROOT, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("MOLDAU_RESULTS_DIR", REPO_ROOT / "results")) / "console"


class ConsoleProcess:
    def __init__(self, workdir: Path, bootstrap: str, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = bootstrap
        self.log_path = Path(workdir) / f"console-{self.port}.log"
        command = [sys.executable, "-m", "broker", "console", "--bootstrap-server", bootstrap,
                   "--port", str(self.port), "--timeout", "5000", *extra]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while "console for" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the console did not start:\n{self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, **headers) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def post(self, path: str, form: dict, **headers) -> int:
        data = "&".join(f"{k}={v}" for k, v in form.items()).encode()
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + path, data=data, headers=headers),
                                        timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def stats(self) -> dict:
        return json.loads(self.get("/stats")[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def start_console(tmp_path):
    started: list[ConsoleProcess] = []

    def start(bootstrap: str, *extra: str) -> ConsoleProcess:
        console = ConsoleProcess(tmp_path, bootstrap, *extra)
        started.append(console)
        return console

    yield start
    for console in started:
        console.stop()


@contextmanager
def chromium():
    """A headless Chromium page (Debian's binary; Playwright cannot download its own here)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"Playwright is not installed (make test-deps): {exc}", pytrace=False)
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: make test-deps installs Debian's chromium", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, timeout=120_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def cell(page, selector: str) -> str:
    return page.locator(selector).inner_text().strip()


def no_trace(text: str) -> None:
    assert not re.search(r"Traceback|File \"", text), text
