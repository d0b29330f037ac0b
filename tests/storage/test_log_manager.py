import json
import shutil
import time

import pytest
from storage_support import append, crash_copy, make_batch, split_batches

from storage.config import LogConfig
from storage.errors import (
    InconsistentMetadata,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    TopicExists,
    UnknownTopic,
)
from storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager

BATCH = len(make_batch(2))


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "data"


def open_manager(log_dir, **config) -> tuple[LogManager, list[str]]:
    manager = LogManager(log_dir, LogConfig(**config))
    return manager, manager.load()


def test_topics_keep_their_ids_and_data_across_restarts(log_dir):
    manager, repairs = open_manager(log_dir)
    assert repairs == []
    orders = manager.create_topic("orders", 3, {"segment.bytes": str(4 * BATCH)})
    payments = manager.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    for _ in range(10):
        append(manager.log("orders", 1), make_batch(2))
    cluster_id = manager.cluster_id
    manager.close()
    assert (log_dir / CLEAN_SHUTDOWN_FILE).exists()

    reopened, repairs = open_manager(log_dir)
    assert repairs == []
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert reopened.cluster_id == cluster_id
    assert reopened.topic("orders") == orders
    assert reopened.topic_by_id(payments.topic_id) == payments
    assert set(reopened.topics) == {"orders", "__consumer_offsets"}
    log = reopened.log("orders", 1)
    assert log.log_end_offset == 20
    assert log.config.segment_bytes == 4 * BATCH
    assert len(log.segments) == 3
    assert reopened.log("orders", 3) is None
    reopened.close()


def test_metadata_files_have_kafka_shapes(log_dir):
    manager, _ = open_manager(log_dir)
    topic = manager.create_topic("t", 1)
    manager.close()
    properties = (log_dir / "meta.properties").read_text().splitlines()
    assert "node.id=1" in properties
    assert any(line.startswith("cluster.id=") and len(line) == len("cluster.id=") + 22 for line in properties)
    catalog = json.loads((log_dir / "topics.json").read_text())
    assert catalog["topics"][0]["name"] == "t"
    assert catalog["topics"][0]["num_partitions"] == 1
    assert (log_dir / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\nt 0 0\n"
    assert LogManager(log_dir, LogConfig(), node_id=1).load() == []
    assert topic.topic_id.version == 4


def test_another_node_id_is_refused(log_dir):
    manager, _ = open_manager(log_dir)
    manager.close()
    with pytest.raises(InconsistentMetadata):
        LogManager(log_dir, LogConfig(), node_id=2).load()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad/name", "spa ce", "ünïcode"])
def test_invalid_topic_names_are_refused(log_dir, name):
    manager, _ = open_manager(log_dir)
    with pytest.raises(InvalidTopic):
        manager.create_topic(name, 1)
    assert dict(manager.topics) == {}


def test_create_topic_refusals(log_dir):
    manager, _ = open_manager(log_dir)
    manager.create_topic("a.b", 1)
    manager.create_topic("a" * 249, 1)
    with pytest.raises(TopicExists):
        manager.create_topic("a.b", 1)
    with pytest.raises(InvalidTopic, match="collides"):
        manager.create_topic("a_b", 1)
    with pytest.raises(InvalidPartitions):
        manager.create_topic("none", 0)
    with pytest.raises(InvalidConfig):
        manager.create_topic("bad", 1, {"segment.bytes": "tiny"})
    assert set(manager.topics) == {"a.b", "a" * 249}
    assert not (log_dir / "bad-0").exists()
    manager.close()


def test_delete_topic_removes_logs_and_catalog_entry(log_dir):
    manager, _ = open_manager(log_dir)
    doomed = manager.create_topic("doomed", 2)
    manager.create_topic("kept", 1)
    append(manager.log("doomed", 0), make_batch(2))
    assert manager.delete_topic("doomed") == doomed
    assert manager.log("doomed", 0) is None
    assert manager.topic_by_id(doomed.topic_id) is None
    assert sorted(p.name for p in log_dir.iterdir() if p.is_dir()) == ["kept-0"]
    with pytest.raises(UnknownTopic):
        manager.delete_topic("doomed")
    manager.close()
    reopened, _ = open_manager(log_dir)
    assert set(reopened.topics) == {"kept"}
    recreated = reopened.create_topic("doomed", 1)
    assert recreated.topic_id != doomed.topic_id
    assert reopened.log("doomed", 0).log_end_offset == 0
    reopened.close()


def test_add_partitions_grows_a_topic(log_dir):
    manager, _ = open_manager(log_dir)
    manager.create_topic("t", 2)
    grown = manager.add_partitions("t", 5)
    assert grown.num_partitions == 5
    assert all(manager.log("t", p) is not None for p in range(5))
    with pytest.raises(InvalidPartitions):
        manager.add_partitions("t", 5)
    with pytest.raises(UnknownTopic):
        manager.add_partitions("nope", 3)
    manager.close()
    reopened, _ = open_manager(log_dir)
    assert reopened.topic("t").num_partitions == 5
    assert reopened.log("t", 4).topic_id == grown.topic_id
    reopened.close()


def test_unclean_shutdown_recovers_from_the_checkpointed_recovery_point(log_dir, tmp_path):
    manager, _ = open_manager(log_dir, segment_bytes=5 * BATCH)
    manager.create_topic("orders", 1)
    log = manager.log("orders", 0)
    for _ in range(12):
        append(log, make_batch(2))
    manager.flush_all()
    assert (log_dir / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2] == "orders 0 24"
    for _ in range(3):
        append(log, make_batch(2))
    crashed = tmp_path / "crashed"
    shutil.copytree(log_dir, crashed)  # no close: no clean-shutdown marker
    manager.close()
    last = sorted((crashed / "orders-0").glob("*.log"))[-1]
    with open(last, "r+b") as f:
        f.truncate(last.stat().st_size - 5)
    recovered, repairs = open_manager(crashed, segment_bytes=5 * BATCH)
    assert len(repairs) == 1
    assert repairs[0].startswith(f"orders-0: truncated {BATCH - 5} bytes of {last.name} at offset 28")
    log = recovered.log("orders", 0)
    assert log.log_end_offset == 28
    assert split_batches(log.read(26, 10**6))[-1].next_offset == 28
    assert (crashed / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2] == "orders 0 28"
    recovered.close()


def test_flush_if_due_checkpoints_moved_recovery_points(log_dir):
    manager, _ = open_manager(log_dir, flush_interval_ms=50)
    created_ms = int(time.time() * 1000)
    manager.create_topic("t", 1)
    append(manager.log("t", 0), make_batch(2))
    checkpoint = log_dir / RECOVERY_POINT_CHECKPOINT
    manager.flush_if_due(now_ms=created_ms - 1_000)
    assert checkpoint.read_text().splitlines()[2] == "t 0 0"
    manager.flush_if_due(now_ms=int(time.time() * 1000) + 60)
    assert checkpoint.read_text().splitlines()[2] == "t 0 2"
    manager.close()


def test_load_finishes_interrupted_creates_and_deletes(log_dir):
    manager, _ = open_manager(log_dir)
    manager.create_topic("t", 2)
    manager.close()
    shutil.rmtree(log_dir / "t-1")  # the catalog was written, the directory was not
    (log_dir / "gone-0.0123abcd-delete").mkdir()  # renamed for deletion, not yet removed
    reopened, repairs = open_manager(log_dir)
    assert repairs == ["t: created missing partition directories [1]"]
    assert reopened.log("t", 1).topic_id == reopened.topic("t").topic_id
    assert not (log_dir / "gone-0.0123abcd-delete").exists()
    reopened.close()


def test_directories_the_catalog_does_not_know_are_set_aside(log_dir):
    manager, _ = open_manager(log_dir)
    manager.create_topic("t", 1)
    append(manager.log("t", 0), make_batch(2))
    manager.close()
    shutil.copytree(log_dir / "t-0", log_dir / "ghost-0")
    shutil.copytree(log_dir / "t-0", log_dir / "t-7")
    reopened, repairs = open_manager(log_dir)
    assert len(repairs) == 2
    assert all("not in the topic catalog" in r for r in repairs)
    assert not (log_dir / "ghost-0").exists()
    assert len(list(log_dir.glob("ghost-0.*-stray"))) == 1
    assert reopened.log("ghost", 0) is None
    assert reopened.log("t", 0).log_end_offset == 2
    reopened.close()


def test_topic_changes_are_journaled_and_survive_a_crash(log_dir):
    """Each create, delete or growth appends a line (one fsync) instead of rewriting topics.json;
    a restart without a clean shutdown replays the journal, ignoring a torn last line, and folds it in."""
    manager, _ = open_manager(log_dir)
    manager.create_topic("a", 2)
    manager.create_topic("b", 1)
    manager.add_partitions("a", 3)
    manager.delete_topic("b")
    journal = log_dir / "topics.json.journal"
    assert len(journal.read_text().splitlines()) == 4
    assert not (log_dir / "topics.json").exists(), "no whole-catalog rewrite per topic"
    with open(journal, "a") as f:
        f.write('{"put": {"name": "torn"')  # a write the crash cut short
    reopened, _ = open_manager(log_dir)  # the first manager was never closed: a crash
    assert {name: t.num_partitions for name, t in reopened.topics.items()} == {"a": 3}
    assert not journal.exists(), "folded into topics.json at startup"
    assert [t["name"] for t in json.loads((log_dir / "topics.json").read_text())["topics"]] == ["a"]
    reopened.close()


def test_a_failed_create_leaves_no_half_topic(log_dir, monkeypatch):
    manager, _ = open_manager(log_dir)
    import storage.log_manager as log_manager

    made = []

    def failing_log(directory, config, **kwargs):
        if len(made) == 5:
            raise OSError(24, "Too many open files")
        made.append(directory)
        return real_log(directory, config, **kwargs)

    real_log = log_manager.Log
    monkeypatch.setattr(log_manager, "Log", failing_log)
    with pytest.raises(OSError):
        manager.create_topic("half", 40)
    monkeypatch.undo()
    assert manager.topic("half") is None and manager.log("half", 0) is None
    assert not list(log_dir.glob("half-*")), "the partitions made before the failure are removed"
    assert manager.create_topic("half", 2).num_partitions == 2, "and the name can be used again"
    manager.close()


def test_segment_files_beyond_the_handle_cache_are_reopened(log_dir):
    """With fewer descriptors than segment files, appends and reads still work: the least recently used
    files are closed and opened again on use."""
    from storage.handles import HANDLES

    capacity = HANDLES.capacity
    HANDLES.set_capacity(8)
    try:
        manager, _ = open_manager(log_dir, segment_bytes=4 * BATCH)
        manager.create_topic("many", 30)
        assert len(HANDLES) <= 8
        reopened = HANDLES.reopened
        for _round in range(3):
            for p in range(30):
                append(manager.log("many", p), make_batch(2))
        assert HANDLES.reopened > reopened
        for p in range(30):
            assert manager.log("many", p).log_end_offset == 6
            assert len(split_batches(manager.log("many", p).read(0, 1 << 20))) == 3
        manager.close()
        again, repairs = open_manager(log_dir, segment_bytes=4 * BATCH)
        assert repairs == [] and len(HANDLES) <= 8
        assert again.log("many", 29).log_end_offset == 6
        again.close()
    finally:
        HANDLES.set_capacity(capacity)


def test_recovery_says_what_it_checks_how_far_it_got_and_how_long_it_took(log_dir, tmp_path, caplog):
    manager, _ = open_manager(log_dir)
    manager.create_topic("orders", 3)
    for partition in range(3):
        for _ in range(4):
            append(manager.log("orders", partition), make_batch(2))
    crashed = crash_copy(log_dir, tmp_path / "crashed")
    manager.close()

    caplog.set_level("INFO", logger="moldau.recovery")
    LogManager(crashed, LogConfig()).load(progress_every_s=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "moldau.recovery"]
    size = f"{12 * BATCH / (1 << 20):.1f} MiB"
    assert lines[0] == (f"{crashed} was not shut down cleanly (no {CLEAN_SHUTDOWN_FILE}): recovering 3 partitions, "
                        f"checking {size} from their recovery points")
    # progress after each segment checked and each partition done (every 0 s here)
    progress = [line.split(",")[0] for line in lines[1:-1]]
    assert progress == ["recovery: 0 of 3 partitions", "recovery: 1 of 3 partitions", "recovery: 1 of 3 partitions",
                        "recovery: 2 of 3 partitions", "recovery: 2 of 3 partitions"]
    assert lines[-1].startswith("recovery done in ") and lines[-1].endswith(f"s: 3 partitions, {size} checked, 0 repaired")

    caplog.clear()
    LogManager(log_dir, LogConfig()).load(progress_every_s=0)  # after a clean shutdown: nothing to say
    assert [r for r in caplog.records if r.name == "moldau.recovery"] == []
