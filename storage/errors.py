"""Exceptions raised by the storage layer.

Each one corresponds to a Kafka error code the broker answers with; OSError
from the file system is left as is and means KAFKA_STORAGE_ERROR.
"""


class StorageError(Exception):
    """Base class of the storage layer's own errors."""


class OffsetOutOfRange(StorageError):
    """A fetch offset below the log start offset or above the log end offset."""


class RecordBatchTooLarge(StorageError):
    """A batch larger than the topic's segment size (RECORD_LIST_TOO_LARGE)."""


class InvalidConfig(StorageError, ValueError):
    """A topic or broker config value that cannot be used (INVALID_CONFIG)."""


class InvalidTopic(StorageError, ValueError):
    """A topic name that breaks Kafka's naming rules (INVALID_TOPIC_EXCEPTION)."""


class TopicExists(StorageError):
    """CreateTopics for a name that is taken (TOPIC_ALREADY_EXISTS)."""


class UnknownTopic(StorageError):
    """A topic that is not in the catalog (UNKNOWN_TOPIC_OR_PARTITION)."""


class InvalidPartitions(StorageError, ValueError):
    """A partition count that is not allowed (INVALID_PARTITIONS)."""


class CorruptIndex(StorageError):
    """An index file that failed validation; the segment rebuilds it."""


class CorruptSnapshot(StorageError):
    """A producer-state snapshot that failed validation; the state is rebuilt from the log."""


class InconsistentMetadata(StorageError):
    """The log directory belongs to another node or holds unreadable metadata."""


class ProducerStateError(StorageError):
    """A batch that the producer state refuses; nothing of the request is appended."""


class InvalidProducerRecord(ProducerStateError):
    """Producer id, epoch, sequence and transactional flag that do not go together (INVALID_RECORD)."""


class OutOfOrderSequence(ProducerStateError):
    """A sequence that does not follow the producer's last one (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpoch(ProducerStateError):
    """A batch from an epoch older than the producer's current one (INVALID_PRODUCER_EPOCH)."""


class DuplicateSequence(ProducerStateError):
    """A retried batch inside a request of several batches (DUPLICATE_SEQUENCE_NUMBER)."""


class TransactionCoordinatorFenced(ProducerStateError):
    """A marker from a coordinator older than one that already wrote here (TRANSACTION_COORDINATOR_FENCED)."""


class LogDirInUse(StorageError):
    """Another process holds the log directory's lock; two brokers on one directory lose data."""


class InvalidTxnState(ProducerStateError):
    """A non-transactional batch from a producer whose transaction is open in the partition (INVALID_TXN_STATE)."""
