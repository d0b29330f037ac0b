"""A cluster's ACLs and SCRAM credentials in etcd, so every broker authorizes and authenticates alike.

    /acls/<id>                         one AclBinding (JSON); the id is a hash of the binding
    /scram_credentials/<user>          the user's credentials by mechanism (salt, StoredKey, ServerKey,
                                       iterations; never a password), the user name percent-encoded

CreateAcls, DeleteAcls and AlterUserScramCredentials write through these stores in one etcd
transaction before they answer; every broker's watch (EtcdMetadataStore) applies the keys to its
authorizer and credentials, the writer's included.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from urllib.parse import quote, unquote

from broker.security.authorizer import AclBinding
from broker.security.scram_credentials import Mechanisms, decode_user, encode_user

ACLS, SCRAM = "acls", "scram_credentials"


def acl_id(binding: AclBinding) -> str:
    return hashlib.sha256(json.dumps(asdict(binding), sort_keys=True).encode()).hexdigest()[:32]


class ClusterSecurity:
    """Swaps the broker's ACL and credential stores for etcd, and applies the watched keys."""

    def __init__(self, metadata) -> None:
        self.metadata = metadata  # the EtcdMetadataStore: its client and key prefix
        broker = metadata.broker
        self.authorizer = broker.authorizer if broker.authorizer.enabled else None
        self.credentials = broker.scram_credentials
        self.acls_by_id: dict[str, AclBinding] = {}
        if self.authorizer is not None:
            self.authorizer.store = self
        self.credentials.store = self
        self.clear()

    def clear(self) -> None:
        """Before a full read of etcd: what it holds replaces everything known so far."""
        self.acls_by_id.clear()
        if self.authorizer is not None:
            self.authorizer.acls = set()
        self.credentials.replace_all({})

    # --- written by this broker ---

    async def _write(self, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
        client = self.metadata.client
        tx = client.transactions
        await client.transaction(compare=[], success=[tx.put(k, v) for k, v in puts.items()]
                                 + [tx.delete(k) for k in deletes], failure=[])

    async def save_acls(self, acls: set[AclBinding], added: set[AclBinding], removed: set[AclBinding]) -> None:
        """AclStore's interface: only the bindings that change are written."""
        key = self.metadata.key
        await self._write({key(ACLS, acl_id(a)): json.dumps(asdict(a)).encode() for a in added},
                          [key(ACLS, acl_id(a)) for a in removed])

    async def save_credentials(self, users: dict[str, Mechanisms], changed: dict[str, Mechanisms | None]) -> None:
        """CredentialsFile's interface: only the users that change are written."""
        def user_key(user: str) -> bytes:
            return self.metadata.key(SCRAM, quote(user, safe=""))

        await self._write({user_key(u): json.dumps(encode_user(m)).encode() for u, m in changed.items() if m},
                          [user_key(u) for u, m in changed.items() if not m])

    # --- watched ---

    def apply(self, kind: str, name: str, value: bytes | None) -> None:
        if kind == ACLS:
            self._apply_acl(name, value)
        else:
            mechanisms: Mechanisms | None = decode_user(json.loads(value)) if value else None
            self.credentials.set_user(unquote(name), mechanisms)

    def _apply_acl(self, name: str, value: bytes | None) -> None:
        if value is None:
            binding = self.acls_by_id.pop(name, None)
            if binding is not None and self.authorizer is not None:
                self.authorizer.acls.discard(binding)
            return
        binding = AclBinding(**json.loads(value))
        self.acls_by_id[name] = binding
        if self.authorizer is not None:
            self.authorizer.acls.add(binding)
