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
import os
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


class ScramCredentials:
    """Credentials in `<log dir>/scram-credentials.json`, rewritten atomically on each change."""

    def __init__(self, path: Path):
        self.path = path
        self._by_user: dict[str, dict[str, ScramCredential]] = {}
        if path.exists():
            for user, mechanisms in json.loads(path.read_text()).items():
                self._by_user[user] = {
                    name: ScramCredential(*(base64.b64decode(c[k]) for k in ("salt", "stored_key", "server_key")),
                                          c["iterations"])
                    for name, c in mechanisms.items()
                }

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, int]]:
        """Each user's mechanisms and their iteration counts (what DescribeUserScramCredentials shows)."""
        return {user: {name: c.iterations for name, c in mechs.items()} for user, mechs in self._by_user.items()}

    def apply(self, deletions: list[tuple[str, str]], upsertions: list[tuple[str, str, ScramCredential]]) -> None:
        """Delete and upsert in one write: after a crash either all of a request's changes are there or none."""
        for user, mechanism in deletions:
            self._by_user.get(user, {}).pop(mechanism, None)
            if not self._by_user.get(user, True):
                del self._by_user[user]
        for user, mechanism, credential in upsertions:
            self._by_user.setdefault(user, {})[mechanism] = credential
        self._save()

    def _save(self) -> None:
        data = {
            user: {name: {"salt": base64.b64encode(c.salt).decode(),
                          "stored_key": base64.b64encode(c.stored_key).decode(),
                          "server_key": base64.b64encode(c.server_key).decode(),
                          "iterations": c.iterations}
                   for name, c in mechs.items()}
            for user, mechs in self._by_user.items()
        }
        atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
        os.chmod(self.path, 0o600)  # keys that let an attacker guess passwords offline: the broker's only
