"""Regenerate protocol/messages.json from Kafka's JSON message definitions.

Kafka publishes its wire format as JSON message definitions (Apache-2.0); a copy
ships inside the kafka-python wheel. This keeps only the structural facts the
codec needs (names, types, version ranges, tags, defaults) and drops comments
and prose. Run: python tools/import_schemas.py [path/to/schemas/resources]
"""

import json
import sys
from pathlib import Path

# Versions Kafka 4.0 removed (KIP-896) that clients and tools of Kafka 3.x still send and Moldau
# serves: WriteTxnMarkers v0 is v1 without flexible encoding, every field is declared "0+".
RESTORED_VERSIONS = {"WriteTxnMarkersRequest": "0-2", "WriteTxnMarkersResponse": "0-2"}
KEEP = ("name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default", "flexibleVersions")
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
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else default_source()
    messages = {}
    for path in sorted(src.glob("*.json")):
        schema = json.loads(strip_comments(path.read_text()))
        if schema.get("type") in ("request", "response", "header"):
            messages[schema["name"]] = slim(schema)
    dest = Path(__file__).resolve().parent.parent / "protocol" / "messages.json"
    dest.write_text(json.dumps(messages, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(messages)} message definitions to {dest}")


if __name__ == "__main__":
    main()
