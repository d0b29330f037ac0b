"""The web console in headless Chromium against real brokers: every page reached by links from the front
page; partitions, leaders and offsets, the latest records, a group's lag per partition and in total (and the
lag moving by itself as records arrive), an open transaction holding back the last stable offset, all equal
to what stock clients read; the error page while the cluster is unreachable; over SASL, only what the
console's principal may describe. Screenshots go to results/console/."""

from __future__ import annotations

import json
import time
from urllib.parse import urlparse

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding, AclOperation, AclPermissionType, NewTopic, ResourcePatternType, ResourceType, ScramCredentialInfo,
    ScramMechanism, UserScramCredentialUpsertion,
)

from conftest import free_port
from protocol.records import build_batch
from helpers.console import ARTIFACTS, cell, chromium, no_trace, screenshot, start_console  # noqa: F401 (fixture)
from helpers.kafka import COMMON, admin, create_topic
from helpers.share import share_consumer, warm_up

pytestmark = pytest.mark.timeout(300)

TOPIC, TXN_TOPIC, GROUP, LIVE_GROUP = "orders", "payments", "billing", "live-readers"
NEW_GROUP, SHARE_TOPIC, SHARE_GROUP = "kip848-readers", "jobs", "workers"  # KIP-848 and share (KIP-932) groups
NEW_COMMITTED = {0: 9, 1: 2, 2: 5}  # NEW_GROUP's committed offsets
COUNTS = {0: 12, 1: 7, 2: 5}  # records produced per partition of TOPIC
COMMITTED = {0: 4, 1: 7, 2: 0}  # GROUP's committed offsets
BASE_TS = 1_700_000_000_000  # record i of a partition has timestamp BASE_TS + 1000 * i
PAGE_BYTES = 64 * 1024  # an HTML page's weight bound (the few-topic pages here are far below)
ASSET_BYTES = 4 * 1024  # console.js's
REQUESTS_PER_MINUTE = 90  # what the group page left open may cost the cluster


def value_of(partition: int, i: int) -> bytes | None:
    """JSON, text and binary values in turn, and one null."""
    if (partition, i) == (1, 3):
        return None
    return [json.dumps({"partition": partition, "n": i}).encode(), f"plain text {i}".encode(),
            bytes([0, 159, 146, 150, i])][i % 3]


def produce_records(bootstrap: str) -> None:
    p = Producer({**COMMON, "bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, n in COUNTS.items():
        for i in range(n):
            p.produce(TOPIC, value_of(partition, i), f"key-{partition}-{i}".encode(), partition=partition,
                      timestamp=BASE_TS + 1000 * i, headers=[("trace", f"t{i}".encode())])
    assert p.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """Committed offsets of a group that then has no member (as a stopped application leaves it)."""
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def truth(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (committed, log end, lag), as a stock client reads them."""
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = {tp.partition: tp.offset for tp in
                     c.committed([TopicPartition(TOPIC, p) for p in COUNTS], timeout=10)}
        found = {}
        for p in COUNTS:
            end = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1]
            found[p] = (committed[p], end, end - committed[p])
        return found
    finally:
        c.close()


def truth_end(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), 30)[1]
    finally:
        c.close()


def crawl(page, base: str) -> dict[str, int]:
    """Every page reachable by <a href> from the front page (same site): path -> HTTP status."""
    seen: dict[str, int] = {}
    queue = ["/"]
    while queue and len(seen) < 40:
        path = queue.pop(0)
        if path in seen:
            continue
        answer = page.goto(base + path)
        seen[path] = answer.status
        no_trace(page.content())
        for href in page.eval_on_selector_all("a[href]", "links => links.map(a => a.getAttribute('href'))"):
            url = urlparse(href)
            if not url.netloc and url.path.startswith("/") and url.path not in seen and not url.query:
                queue.append(url.path)
    return seen


def test_console_pages_in_chromium(broker, start_console, tmp_path):
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 3)
    create_topic(bootstrap, TXN_TOPIC, 1)
    produce_records(bootstrap)
    commit(bootstrap, GROUP, COMMITTED)
    # a group with a member that stays (librdkafka heartbeats from its own thread)
    member = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": LIVE_GROUP,
                       "auto.offset.reset": "earliest", "client.id": "live-reader"})
    member.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.5)
    assert member.assignment(), "the live group's member got no partitions"
    # a KIP-848 group (group.protocol=consumer) with a member that stays and committed offsets
    new_member = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": NEW_GROUP, "group.protocol": "consumer",
                           "auto.offset.reset": "earliest", "client.id": "kip848-reader", "enable.auto.commit": False})
    new_member.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while len(new_member.assignment()) < len(COUNTS) and time.monotonic() < deadline:
        new_member.poll(0.5)
    assert len(new_member.assignment()) == len(COUNTS), "the KIP-848 member got not all partitions"
    new_member.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in NEW_COMMITTED.items()], asynchronous=False)
    # a share group whose member accepted what it read, then four records it has not read
    create_topic(bootstrap, SHARE_TOPIC, 1)
    share_member = share_consumer(bootstrap, SHARE_GROUP, SHARE_TOPIC, explicit=True)
    warm_up(bootstrap, SHARE_TOPIC, [share_member], explicit=True).flush(30)
    p = Producer({**COMMON, "bootstrap.servers": bootstrap})
    for i in range(4):
        p.produce(SHARE_TOPIC, f"job-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    # a transaction left open: its first offset holds back the last stable offset of payments-0
    txn = Producer({**COMMON, "bootstrap.servers": bootstrap, "transactional.id": "payments-writer",
                    "transaction.timeout.ms": 240000})
    txn.init_transactions(30)
    p = Producer({**COMMON, "bootstrap.servers": bootstrap})
    for i in range(3):
        p.produce(TXN_TOPIC, f"committed-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    txn.begin_transaction()
    for i in range(2):
        txn.produce(TXN_TOPIC, f"open-{i}".encode(), partition=0)
    assert txn.flush(30) == 0

    a = admin(bootstrap)  # referenced until the answer is in
    scram = a.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "reporter", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"reporter-secret")])
    for future in scram.values():
        future.result(30)

    console = start_console(bootstrap)
    dead = start_console(f"127.0.0.1:{free_port()}")  # a cluster that is not there
    with chromium() as page:
        # --- every page through links from the front page, none failing, each within its weight bound --------
        page.goto(console.url + "/")
        assert cell(page, "#brokers") .count(f"127.0.0.1:{broker.port}") == 1
        screenshot(page, "overview")
        pages = crawl(page, console.url)
        for path in ("/cluster", "/topics", f"/topics/{TOPIC}", f"/topics/{TXN_TOPIC}", "/groups", f"/groups/{GROUP}",
                     f"/groups/{LIVE_GROUP}", f"/groups/{NEW_GROUP}", f"/groups/{SHARE_GROUP}", "/transactions", "/acls",
                     "/users"):
            assert pages.get(path) == 200, (path, pages)
        weights = {path: len(console.get(path)[1].encode()) for path in pages}
        weights["/static/console.js"] = len(console.get("/static/console.js")[1].encode())
        weights["/static/console.css"] = len(console.get("/static/console.css")[1].encode())
        assert max(w for p, w in weights.items() if not p.startswith("/static")) < PAGE_BYTES, weights
        assert weights["/static/console.js"] < ASSET_BYTES, weights
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "page-weights.json").write_text(json.dumps(weights, indent=2) + "\n")

        # --- the cluster ------------------------------------------------------------------------------------
        page.goto(console.url + "/cluster")
        meta = admin(bootstrap).list_topics(timeout=10)
        partitions = sum(len(t.partitions) for t in meta.topics.values())
        assert cell(page, "#broker-1 .leaders") == str(partitions)
        assert cell(page, "#partition-count") == str(partitions)
        assert cell(page, "#controller") == "1"
        assert (cell(page, "#under-replicated"), cell(page, "#offline"), cell(page, "#under-min-isr")) == ("0", "0", "0")
        screenshot(page, "cluster")

        page.goto(console.url + "/topics")
        assert cell(page, f"#topic-{TOPIC} .messages") == str(sum(COUNTS.values()))
        screenshot(page, "topics")
        page.fill("form.filter input[name=q]", "PAY")
        page.click("form.filter button")
        page.wait_for_url("**q=PAY*")
        assert page.locator(f"#topic-{TXN_TOPIC}").count() == 1 and page.locator(f"#topic-{TOPIC}").count() == 0

        # --- a topic: partitions, offsets, and the latest records on load -----------------------------------
        page.goto(console.url + f"/topics/{TOPIC}")
        for partition, n in COUNTS.items():
            row = f"#partition-{partition}"
            assert (cell(page, f"{row} .leader"), cell(page, f"{row} .replicas"), cell(page, f"{row} .isr")) == ("1", "1", "1")
            assert (cell(page, f"{row} .start"), cell(page, f"{row} .end")) == ("0", str(n))
        rows = page.locator("#messages tbody tr")
        assert rows.count() == COUNTS[0]  # partition 0's latest 20: all 12
        assert cell(page, "#offset-0 td:nth-child(3)") == "key-0-0"
        assert json.loads(cell(page, "#offset-0 pre.json")) == {"partition": 0, "n": 0}
        assert "\n" in cell(page, "#offset-0 pre.json")  # pretty-printed
        assert cell(page, "#offset-1 td:nth-child(4)") == "plain text 1"
        assert cell(page, "#offset-2 code.hex") == "00 9f 92 96 02"
        assert "trace" in cell(page, "#offset-2 td:nth-child(5)") and "t2" in cell(page, "#offset-2 td:nth-child(5)")
        assert "1970" not in cell(page, "#offset-0 td:nth-child(2)")
        assert "retention.ms\t604800000\tDEFAULT_CONFIG" in cell(page, "#configs")
        screenshot(page, "topic")
        # the latest 3 of partition 1, with its null value
        page.goto(console.url + f"/topics/{TOPIC}?partition=1&count=3")
        assert [page.locator("#messages tbody tr td:first-child").nth(i).inner_text() for i in range(3)] == ["4", "5", "6"]
        page.goto(console.url + f"/topics/{TOPIC}?partition=1&count=2&offset=3")
        assert cell(page, "#offset-3 td:nth-child(4)") == "null"
        assert page.locator("#messages tbody tr").count() == 2
        # from a timestamp, through the form
        page.goto(console.url + f"/topics/{TOPIC}")
        page.select_option("#browse select[name=partition]", "0")
        page.fill("#browse input[name=timestamp]", str(BASE_TS + 9000))
        page.fill("#browse input[name=count]", "5")
        page.click("#browse button")
        page.wait_for_url("**timestamp=*")
        assert [page.locator("#messages tbody tr td:first-child").nth(i).inner_text()
                for i in range(page.locator("#messages tbody tr").count())] == ["9", "10", "11"]
        # read_committed: the open transaction's records are not shown, and the offsets stop at the LSO
        page.goto(console.url + f"/topics/{TXN_TOPIC}")
        assert cell(page, "#partition-0 .end") == "5" and cell(page, "#partition-0 .stable") == "3"
        assert page.locator("#messages tbody tr").count() == 5
        page.check("#browse input[name=isolation]")
        page.click("#browse button")
        page.wait_for_url("**isolation=read_committed*")
        assert [page.locator("#messages tbody tr td:nth-child(4)").nth(i).inner_text() for i in range(3)] == \
            [f"committed-{i}" for i in range(3)]
        assert page.locator("#messages tbody tr").count() == 3

        # --- consumer groups: lag per partition and in total equal to the truth -----------------------------
        page.goto(console.url + "/groups")
        assert (cell(page, f"#group-{GROUP} .state"), cell(page, f"#group-{GROUP} .members")) == ("Empty", "0")
        assert (cell(page, f"#group-{LIVE_GROUP} .state"), cell(page, f"#group-{LIVE_GROUP} .members")) == ("Stable", "1")
        expected = truth(bootstrap, GROUP)
        assert cell(page, f"#group-{GROUP} .lag") == str(sum(lag for _, _, lag in expected.values()))
        # the KIP-848 and the share group: their type, Kafka's state, their member and lag
        row = {kind: tuple(cell(page, f"#group-{g} {c}") for c in ("td:nth-child(2)", ".state", ".members"))
               for kind, g in (("consumer", NEW_GROUP), ("share", SHARE_GROUP), ("classic", LIVE_GROUP))}
        assert row == {"consumer": ("consumer", "Stable", "1"), "share": ("share", "Stable", "1"),
                       "classic": ("classic", "Stable", "1")}
        new_truth = {p: (NEW_COMMITTED[p], n, n - NEW_COMMITTED[p]) for p, n in COUNTS.items()}
        assert cell(page, f"#group-{NEW_GROUP} .lag") == str(sum(lag for _, _, lag in new_truth.values()))
        assert cell(page, f"#group-{SHARE_GROUP} .lag") == "4"
        screenshot(page, "groups")
        page.goto(console.url + f"/groups/{NEW_GROUP}")
        assert (cell(page, "#type"), cell(page, "#state")) == ("consumer", "Stable")
        assert int(cell(page, "#group-epoch")) >= 1 and int(cell(page, "#assignment-epoch")) >= 1
        assert {p: tuple(int(cell(page, f"#lag-{TOPIC}-{p} .{c}")) for c in ("committed", "end", "lag"))
                for p in COUNTS} == new_truth
        assert cell(page, "#total-lag") == str(sum(lag for _, _, lag in new_truth.values()))
        assert (cell(page, "#members .client"), cell(page, "#members .assigned"), cell(page, "#members .target")) == (
            "kip848-reader", ", ".join(f"{TOPIC}-{p}" for p in sorted(COUNTS)), ", ".join(f"{TOPIC}-{p}" for p in sorted(COUNTS)))
        assert int(cell(page, "#members .epoch")) >= 1
        screenshot(page, "group-kip848")
        page.goto(console.url + f"/groups/{SHARE_GROUP}")
        assert (cell(page, "#type"), cell(page, "#state")) == ("share", "Stable")
        share_end = truth_end(bootstrap, SHARE_TOPIC, 0)
        assert tuple(int(cell(page, f"#lag-{SHARE_TOPIC}-0 .{c}")) for c in ("committed", "end", "lag")) == (
            share_end - 4, share_end, 4)
        assert cell(page, "#total-lag") == "4"
        assert (cell(page, "#members .client"), cell(page, "#members .assigned")) == ("rdkafka", f"{SHARE_TOPIC}-0")
        screenshot(page, "group-share")
        page.goto(console.url + f"/groups/{GROUP}")

        def shown() -> dict[int, tuple[int, int, int]]:
            return {p: tuple(int(cell(page, f"#lag-{TOPIC}-{p} .{c}")) for c in ("committed", "end", "lag"))
                    for p in COUNTS}

        assert shown() == expected
        assert cell(page, "#total-lag") == str(sum(lag for _, _, lag in expected.values())) == "13"
        # more records: the lag moves without a reload
        page.evaluate("window.notReloaded = true")
        before = console.stats()
        started = time.monotonic()
        p.produce(TOPIC, b"late", partition=2)
        p.produce(TOPIC, b"late", partition=2)
        assert p.flush(30) == 0
        page.wait_for_function("document.getElementById('total-lag').textContent === '15'", timeout=30_000)
        assert page.evaluate("window.notReloaded") is True
        time.sleep(max(0.0, 11 - (time.monotonic() - started)))  # a few refreshes, to measure what they cost
        after = console.stats()
        assert shown() == truth(bootstrap, GROUP)
        points = page.get_attribute("#lag-chart polyline", "points").split()
        assert len(points) >= 2
        per_minute = (sum(after["requests_by_api"].values()) - sum(before["requests_by_api"].values())) \
            / (after["uptime_s"] - before["uptime_s"]) * 60
        assert per_minute <= REQUESTS_PER_MINUTE, (per_minute, before, after)
        (ARTIFACTS / "group-page-requests.json").write_text(json.dumps(
            {"requests_per_minute": round(per_minute, 1), "by_api_before": before["requests_by_api"],
             "by_api_after": after["requests_by_api"]}, indent=2) + "\n")
        screenshot(page, "group")
        page.goto(console.url + f"/groups/{LIVE_GROUP}")
        assert "live-reader" in cell(page, "#members")
        screenshot(page, "group-with-member")

        # --- the open transaction -----------------------------------------------------------------------------
        page.goto(console.url + "/transactions")
        assert cell(page, "#txn-payments-writer .state") == "Ongoing"
        assert cell(page, f"#held-payments-writer-{TXN_TOPIC}-0 .lso") == "3"
        assert cell(page, f"#held-payments-writer-{TXN_TOPIC}-0 .hw") == "5"
        assert "hanging" not in cell(page, "#partition-transactions")  # its coordinator holds it
        assert page.locator("form[action='/transactions/abort']").count() == 0  # read-only console
        screenshot(page, "transactions")
        page.goto(console.url + "/users")
        assert cell(page, "#users tbody") == "reporter\tSCRAM-SHA-256 (8192)"
        screenshot(page, "users")
        page.goto(console.url + "/acls")
        assert cell(page, "#why") == "the cluster has no authorizer"
        screenshot(page, "acls")

        # --- read-only: nothing but reads was ever sent, and the one write action is refused ----------------
        assert console.post("/transactions/abort", {"topic": TXN_TOPIC, "partition": 0, "start_offset": 3}) == 403
        from broker.console.client import READS
        assert set(console.stats()["requests_by_api"]) <= READS

        # --- an unreachable cluster: the error page names the bootstrap address, and no trace -------------
        answer = page.goto(dead.url + "/topics")
        assert answer.status == 503
        assert cell(page, "#error-bootstrap") == dead.bootstrap
        no_trace(page.content())
        screenshot(page, "unreachable")
        # a cluster that goes away under an open page: the page says so by itself, and keeps saying so
        page.goto(console.url + f"/groups/{GROUP}")
        member.close()
        new_member.close()
        share_member.close()
        txn.abort_transaction(30)
        del p, txn  # (librdkafka would retry the dead broker in the background)
        broker.kill()
        page.wait_for_selector("#error-bootstrap", timeout=30_000)
        assert cell(page, "#error-bootstrap") == bootstrap
        answer = page.goto(console.url + "/cluster")
        assert answer.status == 503 and cell(page, "#error-bootstrap") == bootstrap
        no_trace(page.content())


USERS = {"admin": "admin-secret", "viewer": "viewer-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


def test_console_over_sasl_sees_only_what_its_principal_may(start_broker, start_console, tmp_path):
    internal = free_port()
    broker = start_broker({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{{port}},PLAINTEXT://127.0.0.1:{internal}",
        "sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS"})
    superuser = f"127.0.0.1:{internal}"
    a = admin(superuser)
    for future in a.create_topics([NewTopic(t, 1) for t in ("visible", "hidden")]).values():
        future.result(30)
    for group in ("seen-group", "unseen-group"):
        c = Consumer({**COMMON, "bootstrap.servers": superuser, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("visible", 0, 0), TopicPartition("hidden", 0, 0)], asynchronous=False)
        c.close()
    acls = [AclBinding(kind, name, ResourcePatternType.LITERAL, "User:viewer", "*", AclOperation.DESCRIBE,
                       AclPermissionType.ALLOW) for kind, name in ((ResourceType.TOPIC, "visible"),
                                                                   (ResourceType.GROUP, "seen-group"))]
    for future in a.create_acls(acls).values():
        future.result(30)
    config = tmp_path / "viewer.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="viewer" password="viewer-secret";\n')
    console = start_console(broker.bootstrap, "--command-config", str(config))
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(config.read_text().replace("viewer-secret", "not-the-password"))
    refused = start_console(broker.bootstrap, "--command-config", str(wrong))
    with chromium() as page:
        page.goto(console.url + "/topics")
        assert page.locator("#topic-visible").count() == 1, cell(page, "main")
        assert page.locator("#topic-hidden").count() == 0
        screenshot(page, "sasl-topics")
        page.goto(console.url + "/groups")
        assert page.locator("#group-seen-group").count() == 1
        assert page.locator("#group-unseen-group").count() == 0
        page.goto(console.url + "/groups/seen-group")
        assert page.locator("#lag-visible-0").count() == 1  # the hidden topic's offset is not shown
        assert page.locator("#lag-hidden-0").count() == 0
        for path in ("/acls", "/users"):
            page.goto(console.url + path)
            assert cell(page, "#why").startswith("not authorized"), path
        screenshot(page, "sasl-acls")
        answer = page.goto(console.url + "/topics/hidden")
        assert answer.status == 403 and "TOPIC_AUTHORIZATION_FAILED" in cell(page, "#error-message")
        no_trace(page.content())
        answer = page.goto(refused.url + "/")
        assert answer.status == 503 and cell(page, "#error-bootstrap") == broker.bootstrap
        assert "refused the login" in cell(page, "#error-message") or "SASL" in cell(page, "#error-message")
        no_trace(page.content())
        screenshot(page, "sasl-refused-login")


HAND_MADE_PID = 987_654


def test_console_flags_a_hanging_transaction_and_aborts_it_only_with_allow_writes(start_broker, start_console):
    """A transactional batch of a producer id no coordinator knows, appended while the broker is down (as
    tests/integration/test_hanging_transactions.py makes one), hangs: flagged on both consoles, and the
    Abort button offered and working only on the one started with --allow-writes."""
    broker = start_broker()
    create_topic(broker.bootstrap, "wedged", 1)
    p = Producer({**COMMON, "bootstrap.servers": broker.bootstrap})
    p.produce("wedged", b"before", partition=0)
    assert p.flush(30) == 0
    del p
    broker.kill()
    with broker.segment_files("wedged", 0)[-1].open("ab") as f:
        f.write(build_batch([(None, b"hanging")], base_offset=1, producer_id=HAND_MADE_PID, producer_epoch=3,
                            base_sequence=0, transactional=True, timestamp_ms=int(time.time() * 1000) - 120_000))
    broker.start()
    reader = start_console(broker.bootstrap, "--max-transaction-timeout", "1")
    writer = start_console(broker.bootstrap, "--max-transaction-timeout", "1", "--allow-writes")
    with chromium() as page:
        page.goto(reader.url + "/transactions")
        assert "hanging" in cell(page, "#partition-transactions tr.hanging")
        assert str(HAND_MADE_PID) in cell(page, "#partition-transactions tr.hanging")
        assert page.locator("form[action='/transactions/abort']").count() == 0
        page.goto(writer.url + "/topics/wedged")
        assert (cell(page, "#partition-0 .stable"), cell(page, "#partition-0 .end")) == ("1", "2")
        # another site's page cannot post the abort to a console on this machine
        form = {"topic": "wedged", "partition": 0, "start_offset": 1}
        assert writer.post("/transactions/abort", form, Origin="http://elsewhere.example") == 403
        page.goto(writer.url + "/transactions")
        screenshot(page, "transactions-hanging")
        with page.expect_navigation():
            page.click("#partition-transactions tr.hanging button")
        assert "notice=" in page.url, (page.url, cell(page, "main"))
        assert cell(page, "#notice").startswith(f"aborted the transaction of producer {HAND_MADE_PID} at offset 1")
        assert page.locator("#partition-transactions tr.hanging").count() == 0
        page.goto(writer.url + "/topics/wedged")
        assert (cell(page, "#partition-0 .stable"), cell(page, "#partition-0 .end")) == ("3", "3")
    assert "WriteTxnMarkers" not in reader.stats()["requests_by_api"]
    assert writer.stats()["requests_by_api"]["WriteTxnMarkers"] == 1
