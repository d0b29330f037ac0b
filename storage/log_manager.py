"""All partition logs of one log directory, the topic catalog and the directory's metadata files."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import types
import uuid
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from storage import clock
from storage.catalog import (
    TopicMetadata,
    append_catalog,
    collision_key,
    journal_path,
    load_catalog,
    save_catalog,
    validate_topic_name,
)
from storage.checkpoint import MalformedCheckpoint, read_offset_checkpoint, write_offset_checkpoint
from storage.config import LogConfig
from storage.errors import (
    InconsistentMetadata,
    InvalidPartitions,
    InvalidTopic,
    OffsetOutOfRange,
    TopicExists,
    UnknownTopic,
)
from storage.files import atomic_write, encode_uuid, fsync_dir, random_uuid, read_key_values, write_key_values
from storage.log import DELETE_SUFFIX, Log, bytes_to_recover, parse_partition_dir, partition_dir_name, read_topic_id

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CATALOG_FILE = "topics.json"
# Partitions created between two yields of create_topic_steps: the caller's loop serves others in between.
CREATE_STEP = 16
META_PROPERTIES = "meta.properties"
STRAY_SUFFIX = "-stray"

TopicPartition = tuple[str, int]

log = logging.getLogger("moldau.recovery")


class LogManager:
    """Owns ``log_dir``: loads and recovers its logs, creates and deletes topics, flushes.

    The clean-shutdown marker exists only between a clean ``close`` and the
    next ``load``; without it every log is recovered from its checkpointed
    recovery point on.
    """

    def __init__(self, log_dir: Path, default_config: LogConfig, *, node_id: int = 1) -> None:
        self.log_dir = Path(log_dir)
        self.default_config = default_config
        self.node_id = node_id
        self.cluster_id = ""
        self._topics: dict[str, TopicMetadata] = {}
        self._topic_ids: dict[uuid.UUID, TopicMetadata] = {}
        self._logs: dict[TopicPartition, Log] = {}
        self._checkpointed: dict[TopicPartition, int] = {}
        self._creating: set[str] = set()  # topics whose logs are being made (create_topic_steps)
        self._checkpointed_starts: dict[TopicPartition, int] = {}
        self._checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        # changes of any log (its watchers: an append, a moved high watermark or log start, a truncation) and
        # of the set of logs; a checkpoint taken at the current count is skipped (idle: no pass over the logs)
        self._changes = 0
        self._checkpointed_at = self._high_watermarks_at = -1
        self._unflushed: set[TopicPartition] = set()  # logs flush.ms may have to flush (appended to since)
        # where each compacted log's dirty part begins (the log cleaner's progress)
        self.first_dirty_offsets: dict[TopicPartition, int] = {}

    # --- loading -----------------------------------------------------------

    def load(self, progress_every_s: float = 5.0) -> list[str]:
        """Open every partition log, recovering after an unclean shutdown; returns what was repaired.

        A recovery is logged: one line saying why and how much it checks, progress every
        ``progress_every_s`` seconds, and one line with the time it took."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._load_meta_properties()
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        repairs: list[str] = []
        recovery_points = {} if clean else self._read_checkpoint(RECOVERY_POINT_CHECKPOINT, repairs)
        log_starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT, repairs)
        # lost, everything is dirty again: cleaning twice removes nothing more
        self.first_dirty_offsets = self._read_checkpoint(CLEANER_CHECKPOINT, repairs)
        self._set_topics(load_catalog(self.log_dir / CATALOG_FILE))
        self._compact_catalog()
        directories = [child for child in sorted(self.log_dir.iterdir()) if child.is_dir()]
        recovery = None if clean or not directories else _Recovery(self.log_dir, directories, recovery_points, progress_every_s)
        for child in directories:
            self._load_partition_dir(child, clean, recovery_points, log_starts, repairs, recovery)
            if recovery:
                recovery.checked(child)
        if recovery:
            recovery.done(len(repairs))
        for topic in self._topics.values():
            missing = [p for p in range(topic.num_partitions) if (topic.name, p) not in self._logs]
            if missing:
                self._create_logs(topic, missing)
                repairs.append(f"{topic.name}: created missing partition directories {missing}")
        self._write_checkpoint()
        if clean:
            marker.unlink()
            fsync_dir(self.log_dir)
        return repairs

    def _load_meta_properties(self) -> None:
        path = self.log_dir / META_PROPERTIES
        if not path.exists():
            self.cluster_id = encode_uuid(random_uuid())
            write_key_values(path, {"version": "1", "node.id": str(self.node_id), "cluster.id": self.cluster_id}, "=")
            return
        properties = read_key_values(path, "=")
        if properties.get("node.id") != str(self.node_id):
            raise InconsistentMetadata(
                f"{path} is for node.id {properties.get('node.id')}, this broker is node.id {self.node_id}"
            )
        if not properties.get("cluster.id"):
            raise InconsistentMetadata(f"{path} has no cluster.id")
        self.cluster_id = properties["cluster.id"]

    def _read_checkpoint(self, name: str, repairs: list[str]) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(self.log_dir / name)
        except MalformedCheckpoint as exc:
            # recovery points: every segment is recovered; log starts: they fall back to the first segments
            repairs.append(f"ignored {name} ({exc})")
            return {}

    def _load_partition_dir(
        self,
        directory: Path,
        clean: bool,
        recovery_points: dict[TopicPartition, int],
        log_starts: dict[TopicPartition, int],
        repairs: list[str],
        recovery: _Recovery | None,
    ) -> None:
        if directory.name.endswith(DELETE_SUFFIX):
            shutil.rmtree(directory)  # a topic deletion that a crash interrupted
            return
        key = parse_partition_dir(directory.name)
        if key is None:
            return
        topic = self._topics.get(key[0])
        if topic is None or key[1] >= topic.num_partitions:
            repairs.append(self._set_aside(directory, "not in the topic catalog"))
            return
        if read_topic_id(directory) not in (None, topic.topic_id):
            repairs.append(self._set_aside(directory, "left over from an earlier topic of the same name"))
            return
        log = Log(
            directory,
            self.config_for(topic),
            recovery_point=recovery_points.get(key, 0),
            log_start_offset=log_starts.get(key, 0),
            needs_recovery=not clean,
            topic_id=topic.topic_id,
            on_segment_recovered=recovery.segment_recovered if recovery else None,
        )
        self._list_logs({key: log})
        if log.repair_summary:
            repairs.append(log.repair_summary)

    def _set_aside(self, directory: Path, reason: str) -> str:
        """Rename a partition directory the catalog does not know, keeping its data for an operator."""
        stray = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{STRAY_SUFFIX}")
        directory.rename(stray)
        return f"{directory.name}: {reason}; moved to {stray.name}"

    # --- topics ------------------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicMetadata]:
        return types.MappingProxyType(self._topics)

    def topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._topic_ids.get(topic_id)

    def config_for(self, topic: TopicMetadata) -> LogConfig:
        return self.default_config.with_topic_configs(topic.configs)

    def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str] | None = None, topic_id: uuid.UUID | None = None
    ) -> TopicMetadata:
        _run(self.create_topic_steps(name, num_partitions, configs, topic_id))
        return self._topics[name]

    def create_topic_steps(
        self, name: str, num_partitions: int, configs: Mapping[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Iterator[None]:
        """Create a topic, yielding after every CREATE_STEP partitions so an event loop can serve others.
        ``topic_id`` is the cluster's when the metadata store assigned one.

        Atomic: the partition logs are made first, out of sight, and the topic exists from the moment
        its catalog entry is appended; a failure on the way removes the logs made so far.
        """
        validate_topic_name(name)
        if name in self._topics or name in self._creating:
            raise TopicExists(f"topic {name!r} already exists")
        clash = next((t for t in (*self._topics, *self._creating) if collision_key(t) == collision_key(name)), None)
        if clash is not None:
            raise InvalidTopic(f"topic {name!r} collides with existing topic {clash!r} ('.' and '_' clash)")
        if num_partitions < 1:
            raise InvalidPartitions(f"number of partitions must be at least 1, got {num_partitions}")
        configs = dict(configs or {})
        self.default_config.with_topic_configs(configs)  # raises InvalidConfig before anything is written
        while topic_id is None or topic_id in self._topic_ids:
            topic_id = random_uuid()
        topic = TopicMetadata(name, topic_id, num_partitions, configs)
        self._creating.add(name)
        try:
            logs = yield from self._new_logs(topic, range(num_partitions))
            self._commit(put=[topic], logs=logs)
        finally:
            self._creating.discard(name)

    def set_default_config(self, default_config: LogConfig) -> None:
        """New topic defaults (dynamic broker configs): every log's config from them and its topic's own."""
        self.default_config = default_config
        for (name, _), log in self._logs.items():
            topic = self._topics.get(name)
            if topic is not None:
                log.config = default_config.with_topic_configs(topic.configs)
        self._unflushed.update(self._logs)  # flush.ms may apply now

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        """Replace a topic's configs (AlterConfigs); its logs use them from the next write on."""
        topic = self._require(name)
        config = self.default_config.with_topic_configs(configs)  # raises InvalidConfig before anything changes
        altered = dataclasses.replace(topic, configs=dict(configs))
        self._commit(put=[altered])
        for partition in range(topic.num_partitions):
            log = self._logs.get((name, partition))
            if log is not None:
                log.config = config
                self._unflushed.add((name, partition))  # flush.ms may apply now
        return altered

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self._require(name)
        _run(self.delete_topic_steps(name))
        return topic

    def delete_topic_steps(self, name: str) -> Iterator[None]:
        """Delete a topic, yielding after every CREATE_STEP partitions: it is gone from the catalog and
        the logs first; the name cannot be used again until its directories are removed."""
        topic = self._require(name)
        self._commit(delete=[name])
        logs = [self._logs.pop((name, p), None) for p in range(topic.num_partitions)]
        self._changes += 1
        self._creating.add(name)
        try:
            for i, log in enumerate(filter(None, logs), 1):
                log.delete()
                if i % CREATE_STEP == 0:
                    yield
        finally:
            self._creating.discard(name)
        self._write_log_starts()  # a topic created again under this name must not inherit them
        dirty = {key: offset for key, offset in self.first_dirty_offsets.items() if key[0] != name}
        if dirty != self.first_dirty_offsets:
            self.first_dirty_offsets = dirty
            write_offset_checkpoint(self.log_dir / CLEANER_CHECKPOINT, dirty)

    def add_partitions(self, name: str, total: int) -> TopicMetadata:
        """Grow a topic to ``total`` partitions (Kafka can only add, never remove)."""
        _run(self.add_partitions_steps(name, total))
        return self._topics[name]

    def add_partitions_steps(self, name: str, total: int) -> Iterator[None]:
        """add_partitions, yielding every CREATE_STEP partitions; the new ones appear all at once."""
        topic = self._require(name)
        if total <= topic.num_partitions:
            raise InvalidPartitions(
                f"topic {name!r} has {topic.num_partitions} partitions; the new count must be larger, got {total}"
            )
        if name in self._creating:
            raise TopicExists(f"topic {name!r} is being changed by another request")
        grown = dataclasses.replace(topic, num_partitions=total)
        self._creating.add(name)
        try:
            logs = yield from self._new_logs(grown, range(topic.num_partitions, total))
        finally:
            self._creating.discard(name)
        if self._topics.get(name) is not topic:  # deleted (or grown) meanwhile
            for log in logs.values():
                log.delete()
            raise TopicExists(f"topic {name!r} changed while its partitions were being added")
        self._commit(put=[grown], logs=logs)

    def _require(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        return topic

    def _commit(self, put: list[TopicMetadata] = (), delete: list[str] = (), logs: dict | None = None) -> None:
        """Persist first, then switch, so a failed write leaves the catalog as it was."""
        append_catalog(self.log_dir / CATALOG_FILE, put, delete)
        topics = {n: t for n, t in self._topics.items() if n not in delete}
        topics.update((t.name, t) for t in put)
        self._set_topics(topics)
        self._list_logs(logs or {})

    def _list_logs(self, logs: dict[TopicPartition, Log]) -> None:
        for key, log in logs.items():
            log.watchers[self] = partial(self._changed, key)
        self._logs.update(logs)
        self._unflushed.update(logs)
        self._changes += 1

    def _changed(self, key: TopicPartition) -> None:
        self._changes += 1
        self._unflushed.add(key)

    def _compact_catalog(self) -> None:
        """Fold the catalog's journal into a new snapshot (at startup and clean shutdown)."""
        if journal_path(self.log_dir / CATALOG_FILE).exists():
            save_catalog(self.log_dir / CATALOG_FILE, self._topics)

    def _set_topics(self, topics: dict[str, TopicMetadata]) -> None:
        self._topics = topics
        self._topic_ids = {topic.topic_id: topic for topic in topics.values()}

    def _create_logs(self, topic: TopicMetadata, partitions: Iterable[int]) -> None:
        """Logs for partitions the catalog already lists (found missing at startup)."""
        self._list_logs(_run(self._new_logs(topic, partitions)))

    def _new_logs(self, topic: TopicMetadata, partitions: Iterable[int]) -> Iterator[None]:
        """Make the partitions' logs, yielding every CREATE_STEP; returns them (not yet listed), or on
        failure deletes them.

        Nothing here is fsynced but the directory entries: until the catalog lists the topic, a crash
        leaves directories that startup sets aside, and a listed topic's missing files are recreated.
        """
        config = self.config_for(topic)
        logs: dict[TopicPartition, Log] = {}
        try:
            for i, partition in enumerate(partitions, 1):
                directory = self.log_dir / partition_dir_name(topic.name, partition)
                logs[(topic.name, partition)] = Log(directory, config, topic_id=topic.topic_id)
                if i % CREATE_STEP == 0:
                    yield
            fsync_dir(self.log_dir)
        except BaseException:  # an OSError, or the generator closed half-way: no half topic
            for log in logs.values():
                try:
                    log.delete()
                except OSError:
                    pass  # startup sets aside a directory the catalog does not list
            raise
        return logs

    # --- logs --------------------------------------------------------------

    def log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    @property
    def logs(self) -> Mapping[TopicPartition, Log]:
        return types.MappingProxyType(self._logs)

    def flush_if_due(self, now_ms: int) -> None:
        """Apply flush.ms to the logs appended to since; checkpoint recovery points that moved (also by
        flush.messages)."""
        flushed = False
        for key in list(self._unflushed):
            log = self._logs.get(key)
            if log is None:
                self._unflushed.discard(key)
                continue
            flushed = log.flush_if_due(now_ms) or flushed
            # flushed, or no flush.ms to wait for (flush.messages and the OS do it): until the next append
            if log.recovery_point >= log.log_end_offset or log.config.flush_interval_ms is None:
                self._unflushed.discard(key)
        self._write_checkpoint(force=flushed)

    def flush_all(self) -> None:
        for log in self._logs.values():
            log.flush()
        self._write_checkpoint(force=True)

    def _write_checkpoint(self, force: bool = True) -> None:
        """Recovery points and log starts that moved; unless ``force``d, only if some log changed since."""
        if not force and self._checkpointed_at == self._changes:
            return
        self._checkpointed_at = self._changes
        points = {key: log.recovery_point for key, log in self._logs.items()}
        if points != self._checkpointed:
            write_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT, points)
            self._checkpointed = points
        self._write_log_starts()

    def _write_log_starts(self) -> None:
        """Persist log start offsets that DeleteRecords or retention moved (Kafka's log-start-offset-checkpoint)."""
        starts = {key: log.log_start_offset for key, log in self._logs.items() if log.log_start_offset}
        if starts != self._checkpointed_starts:
            write_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT, starts)
            self._checkpointed_starts = starts

    def read_high_watermarks(self) -> list[str]:
        """A replica's high watermarks as last checkpointed, capped at each log end (a replicated broker's
        start: without them readers would see less than before until the followers fetch); the repairs."""
        repairs: list[str] = []
        for key, offset in self._read_checkpoint(HIGH_WATERMARK_CHECKPOINT, repairs).items():
            log = self._logs.get(key)
            if log is not None:
                log.set_high_watermark(max(min(offset, log.log_end_offset), log.log_start_offset))
        return repairs

    def checkpoint_high_watermarks(self) -> None:
        """Persist the high watermarks that moved (Kafka's replication-offset-checkpoint); nothing to look at
        if no log changed since the last time."""
        if self._high_watermarks_at == self._changes:
            return
        self._high_watermarks_at = self._changes
        marks = {key: log.high_watermark for key, log in self._logs.items()}
        if marks != self._checkpointed_high_watermarks:
            write_offset_checkpoint(self.log_dir / HIGH_WATERMARK_CHECKPOINT, marks)
            self._checkpointed_high_watermarks = marks

    # --- retention and cleaning ----------------------------------------------

    def cleaned_up_to(self, key: TopicPartition, offset: int) -> None:
        """The log cleaner cleaned a log below ``offset``: persist it (Kafka's cleaner-offset-checkpoint)."""
        self.first_dirty_offsets[key] = offset
        write_offset_checkpoint(self.log_dir / CLEANER_CHECKPOINT, self.first_dirty_offsets)

    def advance_log_start(self, topic: str, partition: int, offset: int) -> int:
        """Move a partition's log start offset up to ``offset`` and persist it; returns the new log start.

        DeleteRecords comes here (``delete_records``), and so can a follower with the leader's log
        start offset from a fetch response. The segments wholly below go with the next
        ``delete_old_segments``.
        """
        log = self._logs[(topic, partition)]
        if log.advance_log_start(offset):
            self._write_log_starts()
        return log.log_start_offset

    def truncate_fully_and_start_at(self, topic: str, partition: int, offset: int) -> None:
        """A follower behind the leader's log start empties its log and begins there."""
        self._logs[(topic, partition)].truncate_fully_and_start_at(offset)
        self._write_checkpoint()

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """DeleteRecords: ``advance_log_start``, refused with OffsetOutOfRange past the high watermark."""
        log = self._logs[(topic, partition)]
        if not 0 <= offset <= log.high_watermark:
            raise OffsetOutOfRange(f"cannot delete records of {log.name} below {offset}: "
                                   f"its high watermark is {log.high_watermark}")
        return self.advance_log_start(topic, partition, offset)

    def delete_old_segments(self, now_ms: int) -> list[tuple[Log, list[Path]]]:
        """Apply retention to every log; returns each changed log with its renamed
        ``*.deleted`` files, which the caller removes after the log's file.delete.delay.ms."""
        doomed = [(log, files) for log in self._logs.values() if (files := log.delete_old_segments(now_ms))]
        if doomed:
            self._write_log_starts()
        return doomed

    def close(self) -> list[str]:
        """Flush and close every log, then mark the directory as cleanly shut down; returns what failed.

        A log that cannot be closed (a full disk) does not stop the others from closing, and
        leaves the clean-shutdown marker out: the next start recovers instead of trusting the files.
        """
        failures = []
        for log in self._logs.values():
            try:
                log.close()
            except OSError as exc:
                failures.append(f"{log.name}: {exc}")
        try:
            self._write_checkpoint()
            self._compact_catalog()
            if not failures:
                atomic_write(self.log_dir / CLEAN_SHUTDOWN_FILE, b"")
        except OSError as exc:
            failures.append(f"{RECOVERY_POINT_CHECKPOINT} or {CLEAN_SHUTDOWN_FILE}: {exc}")
        self._logs.clear()
        return failures


def _run(steps: Iterator[None]):
    """Drive a generator of steps to its end without pausing; returns what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class _Recovery:
    """The log lines of a recovery after an unclean shutdown: what it checks, progress, how long it took."""

    def __init__(self, log_dir: Path, directories: list[Path], recovery_points: dict[TopicPartition, int],
                 progress_every_s: float):
        self.sizes = {}
        for directory in directories:
            key = parse_partition_dir(directory.name)
            if key is not None and not directory.name.endswith(DELETE_SUFFIX):
                self.sizes[directory] = bytes_to_recover(directory, recovery_points.get(key, 0))
        self.total = sum(self.sizes.values())
        self.partitions_done = self.bytes_done = 0
        self.progress_every_s = progress_every_s
        self.started = self.reported = clock.monotonic()
        log.warning("%s was not shut down cleanly (no %s): recovering %d partitions, checking %s from their "
                    "recovery points", log_dir, CLEAN_SHUTDOWN_FILE, len(self.sizes), _mib(self.total))

    def segment_recovered(self, size: int) -> None:
        self.bytes_done += size
        self._report_progress()

    def checked(self, directory: Path) -> None:
        if directory in self.sizes:
            self.partitions_done += 1
            self._report_progress()

    def _report_progress(self) -> None:
        now = clock.monotonic()
        if now - self.reported >= self.progress_every_s and self.partitions_done < len(self.sizes):
            self.reported = now
            log.info("recovery: %d of %d partitions, %s of %s checked, %.0f s so far", self.partitions_done,
                     len(self.sizes), _mib(self.bytes_done), _mib(self.total), now - self.started)

    def done(self, repairs: int) -> None:
        log.info("recovery done in %.1f s: %d partitions, %s checked, %d repaired", clock.monotonic() - self.started,
                 len(self.sizes), _mib(self.total), repairs)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"
