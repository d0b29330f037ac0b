"""One module per Kafka API; each declares API, VERSIONS and handle()."""

from __future__ import annotations

from typing import Callable, NamedTuple

from protocol.frames import API_KEYS

from . import (
    alter_client_quotas,
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    fetch,
    incremental_alter_configs,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
)
from . import alter_partition_reassignments, elect_leaders, list_partition_reassignments
from . import alter_user_scram_credentials, describe_user_scram_credentials, sasl_authenticate, sasl_handshake
from . import create_acls, delete_acls, describe_acls
from . import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_transactions,
    end_txn,
    list_transactions,
    txn_offset_commit,
    write_txn_markers,
)
from . import consumer_group_describe, consumer_group_heartbeat
from . import share_acknowledge, share_fetch, share_group_describe, share_group_heartbeat
from . import alter_share_group_offsets, delete_share_group_offsets, describe_share_group_offsets
from . import delete_share_group_state, read_share_group_state, write_share_group_state
from . import initialize_share_group_state, read_share_group_state_summary
from . import (
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)


class Handler(NamedTuple):
    name: str
    min_version: int
    max_version: int
    handle: Callable


_MODULES = [
    api_versions,
    sasl_handshake,
    sasl_authenticate,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
    create_acls,
    describe_acls,
    delete_acls,
    metadata,
    produce,
    fetch,
    list_offsets,
    create_topics,
    delete_topics,
    create_partitions,
    describe_cluster,
    describe_topic_partitions,
    describe_configs,
    describe_client_quotas,
    alter_client_quotas,
    init_producer_id,
    describe_producers,
    # retention and runtime configs
    delete_records,
    alter_configs,
    incremental_alter_configs,
    describe_log_dirs,
    # replication
    offset_for_leader_epoch,
    elect_leaders,
    alter_partition_reassignments,
    list_partition_reassignments,
    # consumer groups
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    offset_delete,
    consumer_group_heartbeat,
    consumer_group_describe,
    # share groups (KIP-932)
    share_group_heartbeat,
    share_group_describe,
    share_fetch,
    share_acknowledge,
    describe_share_group_offsets,
    alter_share_group_offsets,
    delete_share_group_offsets,
    read_share_group_state,
    write_share_group_state,
    delete_share_group_state,
    initialize_share_group_state,
    read_share_group_state_summary,
    # transactions
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_transactions,
    list_transactions,
]

HANDLERS: dict[int, Handler] = {
    API_KEYS[m.API]: Handler(m.API, m.VERSIONS[0], m.VERSIONS[1], m.handle) for m in _MODULES
}
