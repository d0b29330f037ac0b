"""DeleteShareGroupState (inter-broker): forget share partitions' durable state at their share coordinator
(DeleteGroups, DeleteShareGroupOffsets); answered once the deletions are committed."""

from broker.handlers import Api

from .write_share_group_state import each_partition

API = Api("DeleteShareGroupState", (0, 0), inter_broker=True)


async def handle(broker, request, header) -> dict:
    return await each_partition(request, lambda key, _: broker.share.persister.write_local(key, None))
