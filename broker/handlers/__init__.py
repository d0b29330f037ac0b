"""One module per Kafka API, found here by pkgutil: adding an API is one new file.

A handler module declares everything the server needs in ``API = Api(...)`` and defines
``handle(broker, request, header)``, sync or async, returning the response body::

    API = Api("JoinGroup", (0, 9), acl=GROUP_READ)

The registry below derives from the declarations the dispatch table (HANDLERS), ApiVersions' answer and
the authorization checks made before a handler runs (broker/security/authorization.py). A module without
``API`` is a helper of the handlers (group_partitions.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

from protocol.frames import API_KEYS

from ..security.authorization import ANYONE, CLUSTER_ACTION, IN_HANDLER, SUPER_USERS, Check


@dataclass
class Api:
    name: str  # Kafka's, as protocol/messages.json spells it; gives the API key
    versions: tuple[int, int]  # the versions implemented, min and max: ApiVersions advertises exactly these
    # the ACL it needs (authorization.py): a tuple of Checks on the whole request, IN_HANDLER (the handler
    # checks each resource it names), ANYONE, or SUPER_USERS (the default)
    acl: tuple[Check, ...] | str | None = None
    inter_broker: bool = False  # sent by brokers only: needs ClusterAction on the cluster (no acl given)
    before_authentication: bool = False  # may come before SASL authentication completes
    reauthenticates: bool = False  # part of the SASL exchange: also after the session expired (KIP-368)
    enabled_by: str | None = None  # a boolean broker setting: while it is off, ApiVersions does not list the API
    # the answer (v0 form) to a version out of range; without it such a request closes the connection
    unsupported_version: Callable[[], dict] | None = None
    # the node id of the follower sending the request (-1: a client): marks a replica fetcher's connection
    follower_id: Callable[[dict], int] | None = None
    parked: bool = False  # a long poll, dropped when its connection closes
    key: int = field(init=False)
    handle: Callable = field(init=False, repr=False)  # the module's handle(), bound by the registry

    def __post_init__(self) -> None:
        if self.name not in API_KEYS:
            raise ValueError(f"{self.name}: not an API of protocol/messages.json")
        self.key = API_KEYS[self.name]
        if not 0 <= self.versions[0] <= self.versions[1]:
            raise ValueError(f"{self.name}: versions {self.versions} are not (min, max)")
        if self.inter_broker:
            if self.acl is not None:
                raise ValueError(f"{self.name}: an inter-broker API needs ClusterAction; declare no acl")
            self.acl = CLUSTER_ACTION
        elif self.acl is None:
            self.acl = SUPER_USERS
        if not (self.acl in (ANYONE, IN_HANDLER, SUPER_USERS)
                or isinstance(self.acl, tuple) and all(isinstance(c, Check) for c in self.acl)):
            raise ValueError(f"{self.name}: acl {self.acl!r} is not an ACL requirement (authorization.py)")

    @property
    def min_version(self) -> int:
        return self.versions[0]

    @property
    def max_version(self) -> int:
        return self.versions[1]


def _registry() -> dict[int, Api]:
    handlers: dict[int, Api] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        api = getattr(module, "API", None)
        if api is None:
            continue
        if not isinstance(api, Api) or api.key in handlers:
            raise ValueError(f"{module.__name__}: API must be one Api(...) per API key")
        api.handle = module.handle
        handlers[api.key] = api
    return dict(sorted(handlers.items()))


HANDLERS: dict[int, Api] = _registry()
