"""Regenerate protocol/messages.json from Kafka's JSON message definitions.

Kafka publishes its wire format as JSON message definitions (Apache-2.0); a copy
ships inside the kafka-python wheel. This keeps only the structural facts the
codec needs (names, types, version ranges, tags, defaults) and drops comments
and prose. Run: python tools/import_schemas.py [path/to/schemas/resources ...]

Definitions are merged into the existing file, so a source that lacks some (the
wheel has no KIP-848 APIs, nor the group coordinator's record schemas, which come
from Kafka's clients/ and group-coordinator/ resources) does not drop them. The
KIP-932 share group APIs are Kafka 4.1's stable versions (ShareGroupHeartbeat,
ShareGroupDescribe, ShareFetch, ShareAcknowledge v1; the share-state APIs and
the admin offsets APIs) and ShareSnapshotKey/Value the share coordinator's record
v0, written into the file from Kafka's definitions; so are the share group records
of __consumer_offsets (ShareGroup*Key/Value, Kafka 4's, keys at version = record
type as the consumer group ones), InitializeShareGroupState and
ReadShareGroupStateSummary; an import from a newer Kafka leaves the records alone
(the broker writes exactly those fields).
"""

import json
import sys
from pathlib import Path

# Versions Kafka 4.0 removed (KIP-896) that clients and tools of Kafka 3.x still send and Moldau
# serves: WriteTxnMarkers v0 is v1 without flexible encoding, every field is declared "0+".
RESTORED_VERSIONS = {"WriteTxnMarkersRequest": "0-2", "WriteTxnMarkersResponse": "0-2"}
KEEP = ("name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "flexibleVersions")
# __consumer_offsets record schemas ("data") of KIP-848 consumer groups, encoded with the same codec
COORDINATOR_RECORDS = {
    f"ConsumerGroup{name}{part}"
    for name in ("Metadata", "MemberMetadata", "TargetAssignmentMetadata", "TargetAssignmentMember",
                 "CurrentMemberAssignment")
    for part in ("Key", "Value")
}
ROOT_KEEP = ("apiKey", "type", "name", "validVersions", "flexibleVersions")


def strip_comments(text: str) -> str:
    return "".join(line for line in text.splitlines(True) if not line.lstrip().startswith("//"))


def slim_fields(fields: list) -> list:
    out = []
    for f in fields:
        g = {k: f[k] for k in KEEP if k in f}
        if "fields" in f:
            g["fields"] = slim_fields(f["fields"])
        out.append(g)
    return out


def slim(schema: dict) -> dict:
    out = {k: schema[k] for k in ROOT_KEEP if k in schema}
    out["validVersions"] = RESTORED_VERSIONS.get(schema["name"], out["validVersions"])
    out["fields"] = slim_fields(schema.get("fields", []))
    if schema.get("commonStructs"):
        out["commonStructs"] = [
            {"name": s["name"], "fields": slim_fields(s["fields"])} for s in schema["commonStructs"]
        ]
    return out


def default_source() -> Path:
    import kafka.protocol.schemas.resources as res

    return Path(res.__file__).parent


def main() -> None:
    sources = [Path(arg) for arg in sys.argv[1:]] or [default_source()]
    dest = Path(__file__).resolve().parent.parent / "protocol" / "messages.json"
    messages = json.loads(dest.read_text()) if dest.exists() else {}
    for path in sorted(p for src in sources for p in src.glob("*.json")):
        schema = json.loads(strip_comments(path.read_text()))
        if schema.get("type") in ("request", "response", "header") or schema["name"] in COORDINATOR_RECORDS:
            messages[schema["name"]] = slim(schema)
    dest.write_text(json.dumps(messages, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(messages)} message definitions to {dest}")


if __name__ == "__main__":
    main()
