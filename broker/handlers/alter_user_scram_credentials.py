"""AlterUserScramCredentials: upsert or delete users' SCRAM credentials (the client sends a salted
password; the broker keeps only what checks a login, see broker/security/scram_credentials.py)."""

from collections import Counter

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.scram_credentials import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MIN_ITERATIONS,
    credential_from_salted_password,
)

API = Api("AlterUserScramCredentials", (0, 0), acl=IN_HANDLER)


def _problem(change: dict, upsert: bool, users: dict, twice: Counter) -> tuple[int, str] | None:
    name, mechanism = change["name"], MECHANISM_BY_TYPE.get(change["mechanism"])
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if twice[(name, change["mechanism"])] > 1:
        return ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert and change["iterations"] < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations (at least {MIN_ITERATIONS})"
    if upsert and change["iterations"] > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations (at most {MAX_ITERATIONS})"
    if upsert and (not change["salt"] or not change["salted_password"]):
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    if not upsert and mechanism not in users.get(name, {}):
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


async def handle(broker, request, header) -> dict:
    store = broker.scram_credentials
    users = store.users()
    changes = [(c, False) for c in request["deletions"]] + [(c, True) for c in request["upsertions"]]
    twice = Counter((c["name"], c["mechanism"]) for c, _ in changes)
    errors: dict[str, tuple[int, str]] = {}
    for change, upsert in changes:
        problem = _problem(change, upsert, users, twice)
        if problem is not None and change["name"] not in errors:
            errors[change["name"]] = problem  # a user's changes apply all together or not at all
    if not broker.authorizer.authorize_cluster(header, "Alter"):
        errors = {c["name"]: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for c, _ in changes}
    deletions = [(c["name"], MECHANISM_BY_TYPE[c["mechanism"]])
                 for c, upsert in changes if not upsert and c["name"] not in errors]
    upsertions = [(c["name"], MECHANISM_BY_TYPE[c["mechanism"]],
                   credential_from_salted_password(MECHANISM_BY_TYPE[c["mechanism"]], bytes(c["salt"]),
                                                   bytes(c["salted_password"]), c["iterations"]))
                  for c, upsert in changes if upsert and c["name"] not in errors]
    if deletions or upsertions:
        await store.apply(deletions, upsertions)
    results = []
    for name in dict.fromkeys(c["name"] for c, _ in changes):  # each user once, in request order
        code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
