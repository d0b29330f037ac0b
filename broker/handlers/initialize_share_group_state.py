"""InitializeShareGroupState (inter-broker, the share coordinator's): a share partition's state starts anew at
a start offset (-1: the leader's share.auto.offset.reset) and state epoch, asked by the group coordinator when a
share group first subscribes to a topic or its offsets are altered; answered once committed. A state epoch older
than the stored one is FENCED_STATE_EPOCH."""

from broker.handlers import Api

from .write_share_group_state import each_partition

API = Api("InitializeShareGroupState", (0, 0), inter_broker=True)


async def handle(broker, request, header) -> dict:
    return await each_partition(request, lambda key, p: broker.share.persister.initialize_local(
        key, p["state_epoch"], p["start_offset"]))
