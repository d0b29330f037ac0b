"""SCRAM credentials (RFC 5802): per user and mechanism a salt, an iteration count, StoredKey and ServerKey.

AlterUserScramCredentials hands the broker a salted password, never the password; what is kept is less
still: StoredKey = H(HMAC(salted, "Client Key")) checks a client's proof and ServerKey = HMAC(salted,
"Server Key") signs the broker's answer, and neither lets anyone log in as the user. The store is a
small interface (get, upsert, delete, users) so a cluster can keep it in its metadata store instead of
this file in the log directory.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from storage.files import atomic_write

# Kafka's ScramMechanism: type byte in the admin APIs, hash, and the iteration counts it accepts
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MECHANISM_BY_TYPE = {type_: name for name, (type_, _) in MECHANISMS.items()}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
CREDENTIALS_FILE = "scram-credentials.json"


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    digest = MECHANISMS[mechanism][1]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(), server_key, iterations)


Mechanisms = dict[str, ScramCredential]  # one user's credentials by mechanism name


def encode_user(mechanisms: Mechanisms) -> dict:
    return {name: {"salt": base64.b64encode(c.salt).decode(), "stored_key": base64.b64encode(c.stored_key).decode(),
                   "server_key": base64.b64encode(c.server_key).decode(), "iterations": c.iterations}
            for name, c in mechanisms.items()}


def decode_user(data: dict) -> Mechanisms:
    return {name: ScramCredential(*(base64.b64decode(c[k]) for k in ("salt", "stored_key", "server_key")),
                                  c["iterations"])
            for name, c in data.items()}


class CredentialsFile:
    """`<log dir>/scram-credentials.json`, rewritten atomically on each change."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[str, Mechanisms]:
        if not self.path.exists():
            return {}
        return {user: decode_user(data) for user, data in json.loads(self.path.read_text()).items()}

    async def save_credentials(self, users: dict[str, Mechanisms], changed: dict[str, Mechanisms | None]) -> None:
        data = {user: encode_user(mechs) for user, mechs in users.items()}
        # keys that let an attacker guess passwords offline: the broker's only
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o600)


class ScramCredentials:
    """Every user's credentials in memory, written through a store: a file in the log directory, or etcd
    in a cluster (cluster/etcd_security.py), whose watch brings other brokers' changes with set_user."""

    def __init__(self, path: Path):
        self.store = CredentialsFile(path)
        self._by_user: dict[str, Mechanisms] = self.store.load()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """Each user's mechanisms and their iteration counts (what DescribeUserScramCredentials shows)."""
        return {user: {name: c.iterations for name, c in mechs.items()} for user, mechs in self._by_user.items()}

    async def apply(self, deletions: list[tuple[str, str]],
                    upsertions: list[tuple[str, str, ScramCredential]]) -> None:
        """Delete and upsert in one write: after a crash either all of a request's changes are there or none."""
        changed = {user: dict(self._by_user.get(user, {})) for user, *_ in (*deletions, *upsertions)}
        for user, mechanism in deletions:
            changed[user].pop(mechanism, None)
        for user, mechanism, credential in upsertions:
            changed[user][mechanism] = credential
        after = {**self._by_user, **changed}
        await self.store.save_credentials({user: mechs for user, mechs in after.items() if mechs},
                              {user: mechs or None for user, mechs in changed.items()})
        for user, mechs in changed.items():
            self.set_user(user, mechs or None)

    def set_user(self, user: str, mechanisms: Mechanisms | None) -> None:
        if mechanisms:
            self._by_user[user] = mechanisms
        else:
            self._by_user.pop(user, None)

    def replace_all(self, users: dict[str, Mechanisms]) -> None:
        self._by_user = dict(users)
