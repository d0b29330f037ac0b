"""What an open console page costs: broker requests per refresh and per minute, and its weight in bytes.

    .venv/bin/python -m bench.console_cost [--screenshot docs/console-group.png]

Starts a broker and `moldau console` on 127.0.0.1, gives the cluster a few topics, two consumer groups (one
with a member, lag growing while a producer writes) and an open transaction, then asks each page's live part
(what console.js fetches every 5 s) three times, a cache lifetime apart, and reads the console's request
counts (/stats) around each. With --screenshot, headless Chromium (Debian's) photographs the group page after
a minute of lag history. Prints a Markdown table (docs/console.md has one)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.targets import free_port
from broker.console.app import CACHE_S, REFRESH_S

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["/", "/cluster", "/topics", "/topics/orders", "/groups", "/groups/billing", "/transactions", "/acls",
         "/users"]


def wait_for(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def get(url: str, live: bool = False) -> bytes:
    request = urllib.request.Request(url, headers={"X-Console-Live": "1"} if live else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


def populate(bootstrap: str, stop: threading.Event) -> list:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("orders", 6), NewTopic("payments", 3), NewTopic("audit", 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(3000):
        producer.produce("orders", json.dumps({"order": i, "amount": i % 97}).encode(), f"customer-{i % 50}".encode())
    producer.flush(30)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                       "client.id": "billing-1", "enable.auto.commit": True, "auto.commit.interval.ms": 1000})
    member.subscribe(["orders"])
    idle = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit-export", "auto.offset.reset": "earliest"})
    idle.subscribe(["orders"])
    for _ in range(40):
        idle.poll(0.2)
    idle.close()
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "payments-writer",
                    "transaction.timeout.ms": 600000})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("payments", b"pending", partition=0)
    txn.flush(30)

    def work() -> None:  # ten times a second: 30 records in bursts of 15 s, the member reads 20: lag goes up and down
        i = 0
        while not stop.is_set():
            i += 1
            for j in range(30 if (i // 150) % 2 == 0 else 0):
                producer.produce("orders", b'{"late": %d}' % j)
            producer.poll(0)
            for _ in range(20):
                member.poll(0.001)
            time.sleep(0.1)
        member.close()

    threading.Thread(target=work, daemon=True).start()
    return [producer, txn]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshot", help="save a picture of the group page here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="console-cost-"))
    port, web = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    processes = [subprocess.Popen([sys.executable, "-m", "broker", "serve", "--override",
                                   f"listeners=PLAINTEXT://{bootstrap}", "--override", f"log.dirs={work}/data"],
                                  cwd=ROOT, stderr=open(work / "broker.log", "wb"))]
    stop = threading.Event()
    try:
        time.sleep(3)
        keep = populate(bootstrap, stop)
        processes.append(subprocess.Popen([sys.executable, "-m", "broker", "console", "--bootstrap-server", bootstrap,
                                           "--port", str(web)], cwd=ROOT, stderr=open(work / "console.log", "wb")))
        base = f"http://127.0.0.1:{web}"
        wait_for(base + "/stats")
        rows = []
        for page in PAGES:
            weight = len(get(base + page))
            time.sleep(CACHE_S + 0.2)
            counts = []
            for _ in range(3):
                before = sum(json.loads(get(base + "/stats"))["requests_by_api"].values())
                get(base + page, live=True)
                counts.append(sum(json.loads(get(base + "/stats"))["requests_by_api"].values()) - before)
                time.sleep(CACHE_S + 0.2)
            per_refresh = sum(counts) / len(counts)
            rows.append((page, weight, per_refresh, per_refresh * 60 / REFRESH_S))
        print("| page | HTML bytes | broker requests per refresh | per minute, one open page |")
        print("|---|---:|---:|---:|")
        for page, weight, per_refresh, per_minute in rows:
            print(f"| `{page}` | {weight} | {per_refresh:g} | {per_minute:g} |")
        print(f"\nstatic: console.js {len(get(base + '/static/console.js'))} B, "
              f"console.css {len(get(base + '/static/console.css'))} B (cached an hour)")
        if args.screenshot:
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=[
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run"])
                page = browser.new_page(viewport={"width": 1100, "height": 760})
                page.goto(base + "/groups/billing")
                time.sleep(60)  # lag history: twelve refreshes
                page.screenshot(path=args.screenshot, full_page=True)
                browser.close()
        del keep
    finally:
        stop.set()
        for process in reversed(processes):
            process.terminate()
            process.wait(20)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
