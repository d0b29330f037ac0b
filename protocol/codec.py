"""Kafka message codecs compiled from Kafka's JSON message definitions.

For every (message, version) pair that is used, we generate the source of a
decoder and an encoder specialised to that version (fixed-width runs packed
with one struct call, compact vs. classic lengths decided at build time) and
compile it once. Messages are plain dicts with snake_case keys; a decoded
message carries every field of the schema, with defaults for fields that are
absent in its version, so handlers need no version checks.

Decoding is bounds-checked: every length is compared with the bytes left
before anything is allocated, so hostile input costs at most its own size.
Records fields are returned as memoryview slices and encoded without copying
when large (see ``Writer``). An element of an array of structs may be an
``Encoded``: bytes its caller encoded for this version, written as they are
(a hot path answering many alike elements encodes them once).
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from functools import lru_cache
from pathlib import Path

_DEFS = json.loads((Path(__file__).parent / "messages.json").read_text())

_FIXED = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "float64": "d", "bool": "?"}
_ZERO_COPY_MIN = 4096  # records at least this large are passed to the transport as-is


class DecodeError(ValueError):
    """The bytes do not form a valid message of the expected version."""


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class VersionRange:
    """A schema version expression: "3+", "0-7", "5", or "none"."""

    __slots__ = ("lo", "hi")

    def __init__(self, spec: str | None):
        if not spec or spec == "none":
            self.lo, self.hi = 1, 0
        elif spec.endswith("+"):
            self.lo, self.hi = int(spec[:-1]), 1 << 15
        elif "-" in spec:
            lo, hi = spec.split("-")
            self.lo, self.hi = int(lo), int(hi)
        else:
            self.lo = self.hi = int(spec)

    def __contains__(self, version: int) -> bool:
        return self.lo <= version <= self.hi


def definition(name: str) -> dict:
    return _DEFS[name]


def api_key_of(name: str) -> int:
    return _DEFS[name]["apiKey"]


# parsed once: every request and response asks this
_FLEXIBLE = {name: VersionRange(d.get("flexibleVersions")) for name, d in _DEFS.items()}


def is_flexible(name: str, version: int) -> bool:
    return version in _FLEXIBLE[name]


def valid_versions(name: str) -> VersionRange:
    return VersionRange(_DEFS[name]["validVersions"])


# --- runtime helpers used by the generated code -----------------------------


def _uvarint(buf, p: int, end: int) -> tuple[int, int]:
    v = 0
    shift = 0
    while True:
        if p >= end or shift > 28:
            raise DecodeError("bad unsigned varint")
        b = buf[p]
        p += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, p
        shift += 7


def skip_tagged_fields(buf, p: int, end: int) -> int:
    """Skip a tagged-field section whose fields we do not read (header tags)."""
    count, p = _uvarint(buf, p, end)
    for _ in range(count):
        _, p = _uvarint(buf, p, end)
        size, p = _uvarint(buf, p, end)
        _check(p, size, end)
        p += size
    return p


def _w_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _check(p: int, n: int, end: int) -> None:
    if n < 0 or p + n > end:
        raise DecodeError("length exceeds the frame")


def _uuid_bytes(v) -> bytes:
    if v is None:
        return bytes(16)
    return v.bytes if isinstance(v, uuid.UUID) else bytes(v)


class Encoded(bytes):
    """One struct of an array, already encoded for the message's version."""

    __slots__ = ()


class Writer:
    """An encode buffer that keeps large record sets out of the copy path.

    Small fields go into ``buf``; a large records field ends the current
    chunk and is kept as its own buffer, so a Fetch response of segment bytes
    reaches the socket with a single copy (the kernel's).
    """

    __slots__ = ("buf", "parts")

    def __init__(self):
        self.buf = bytearray()
        self.parts: list = []

    def records(self, data) -> None:
        if len(data) >= _ZERO_COPY_MIN:
            self.parts.append(self.buf)
            self.parts.append(data)
            self.buf = bytearray()
        else:
            self.buf += data

    def chunks(self) -> list:
        return [*self.parts, self.buf] if self.parts else [self.buf]

    def getvalue(self) -> bytes:
        return b"".join(self.chunks())


_RUNTIME = {
    "struct": struct,
    "uuid": uuid,
    "DecodeError": DecodeError,
    "_uvarint": _uvarint,
    "_w_uvarint": _w_uvarint,
    "_check": _check,
    "_uuid_bytes": _uuid_bytes,
    "Writer": Writer,
    "Encoded": Encoded,
}


# --- code generation ---------------------------------------------------------


def _default_literal(field: dict) -> str:
    ftype = field["type"]
    raw = field.get("default")
    if ftype.startswith("[]"):
        return "[]"
    if ftype in _FIXED:
        if raw in (None, ""):
            return "False" if ftype == "bool" else ("0.0" if ftype == "float64" else "0")
        if ftype == "bool":
            return "True" if str(raw).lower() == "true" else "False"
        return repr(float(raw)) if ftype == "float64" else repr(int(str(raw), 0))
    if ftype == "uuid":
        return "_ZERO_UUID"
    if raw == "null":
        return "None"
    if ftype == "string":
        return repr(raw or "")
    if ftype in ("bytes", "records"):
        return "b''"
    return "None"  # a nested struct: absent means "not present"


class _Compiler:
    """Generates decode/encode source for one message at one version."""

    def __init__(self, name: str, version: int):
        self.msg = _DEFS[name]
        self.version = version
        self.flexible = version in VersionRange(self.msg.get("flexibleVersions"))
        self.structs = {s["name"]: s["fields"] for s in self.msg.get("commonStructs", [])}
        self.lines: list[str] = []
        self.consts: dict[str, object] = {"_ZERO_UUID": uuid.UUID(int=0)}
        self.counter = 0

    # helpers
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def struct_const(self, fmt: str) -> str:
        key = "_S_" + fmt.replace("?", "B_")
        if key not in self.consts:
            self.consts[key] = struct.Struct(">" + fmt)
        return key

    def fields_of(self, field: dict) -> list:
        if "fields" in field:
            return field["fields"]
        base = field["type"][2:] if field["type"].startswith("[]") else field["type"]
        return self.structs[base]

    def present(self, field: dict) -> bool:
        return self.version in VersionRange(field.get("versions"))

    def nullable(self, field: dict) -> bool:
        return self.version in VersionRange(field.get("nullableVersions"))

    def tagged(self, field: dict) -> bool:
        return "tag" in field and self.version in VersionRange(field.get("taggedVersions"))

    def field_flexible(self, field: dict) -> bool:
        if "flexibleVersions" in field:
            return self.version in VersionRange(field["flexibleVersions"])
        return self.flexible

    # ---- decoding ----
    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def gen_decode_fields(self, fields: list, indent: int, target: str) -> None:
        """Emit code that reads ``fields`` from buf at p into dict ``target``."""
        run: list[tuple[str, str]] = []  # pending fixed-width (key, fmt)

        def flush_run():
            if not run:
                return
            fmt = "".join(f for _, f in run)
            const = self.struct_const(fmt)
            names = ", ".join(f"{target}[{k!r}]" for k, _ in run)
            self.emit(indent, f"{names}{',' if len(run) == 1 else ''} = {const}.unpack_from(buf, p)")
            self.emit(indent, f"p += {struct.calcsize('>' + fmt)}")
            run.clear()

        tagged = []
        for field in fields:
            key = snake(field["name"])
            if not self.present(field):
                self.emit_default(indent, target, key, field)
                continue
            if self.tagged(field):
                self.emit_default(indent, target, key, field)
                tagged.append(field)
                continue
            if field["type"] in _FIXED:
                run.append((key, _FIXED[field["type"]]))
                continue
            flush_run()
            self.gen_decode_value(field, indent, f"{target}[{key!r}]")
        flush_run()
        if self.flexible:
            self.gen_decode_tags(tagged, indent, target)

    def emit_default(self, indent: int, target: str, key: str, field: dict) -> None:
        self.emit(indent, f"{target}[{key!r}] = {_default_literal(field)}")

    def gen_decode_tags(self, tagged: list, indent: int, target: str) -> None:
        # fresh names per section: a tagged array's elements have tag sections of their own
        n, tag, size, tag_end, outer_end = (self.fresh(v) for v in ("nt", "tag", "size", "tag_end", "outer_end"))
        # nearly every section is empty (one zero byte): that case without a call, for arrays of many elements
        self.emit(indent, "if p < end and buf[p] == 0:")
        self.emit(indent + 1, "p += 1")
        self.emit(indent, "else:")
        indent += 1
        self.emit(indent, f"{n}, p = _uvarint(buf, p, end)")
        self.emit(indent, f"for _ in range({n}):")
        self.emit(indent + 1, f"{tag}, p = _uvarint(buf, p, end)")
        self.emit(indent + 1, f"{size}, p = _uvarint(buf, p, end)")
        self.emit(indent + 1, f"_check(p, {size}, end)")
        self.emit(indent + 1, f"{tag_end} = p + {size}")
        for i, field in enumerate(tagged):
            self.emit(indent + 1, f"{'if' if i == 0 else 'elif'} {tag} == {field['tag']}:")
            self.emit(indent + 2, f"{outer_end}, end = end, {tag_end}")
            self.gen_decode_value(field, indent + 2, f"{target}[{snake(field['name'])!r}]")
            self.emit(indent + 2, f"end = {outer_end}")
        self.emit(indent + 1, f"p = {tag_end}")

    def gen_length(self, indent: int, var: str, flexible: bool, int32: bool) -> None:
        """Read a length (or array count) into var; -1 means null."""
        if flexible:
            self.emit(indent, f"{var}, p = _uvarint(buf, p, end)")
            self.emit(indent, f"{var} -= 1")
        else:
            fmt = "i" if int32 else "h"
            self.emit(indent, f"{var}, = {self.struct_const(fmt)}.unpack_from(buf, p)")
            self.emit(indent, f"p += {4 if int32 else 2}")

    def gen_decode_value(self, field: dict, indent: int, dest: str) -> None:
        ftype = field["type"]
        flex = self.field_flexible(field)
        if ftype in _FIXED:
            const = self.struct_const(_FIXED[ftype])
            self.emit(indent, f"{dest}, = {const}.unpack_from(buf, p)")
            self.emit(indent, f"p += {struct.calcsize('>' + _FIXED[ftype])}")
        elif ftype == "uuid":
            self.emit(indent, "_check(p, 16, end)")
            self.emit(indent, f"{dest} = uuid.UUID(bytes=bytes(buf[p:p + 16]))")
            self.emit(indent, "p += 16")
        elif ftype in ("string", "bytes", "records"):
            n = self.fresh("n")
            self.gen_length(indent, n, flex, int32=ftype != "string")
            self.emit(indent, f"if {n} < 0:")
            if self.nullable(field):
                self.emit(indent + 1, f"{dest} = None")
            else:
                self.emit(indent + 1, f"raise DecodeError('null {field['name']}')")
            self.emit(indent, "else:")
            self.emit(indent + 1, f"_check(p, {n}, end)")
            if ftype == "string":
                self.emit(indent + 1, f"{dest} = str(buf[p:p + {n}], 'utf-8')")
            elif ftype == "records":
                self.emit(indent + 1, f"{dest} = buf[p:p + {n}]")
            else:
                self.emit(indent + 1, f"{dest} = bytes(buf[p:p + {n}])")
            self.emit(indent + 1, f"p += {n}")
        elif ftype.startswith("[]"):
            self.gen_decode_array(field, indent, dest, flex)
        else:  # a single nested struct; a nullable one has an int8 marker first (KIP-893)
            if self.nullable(field):
                flag = self.fresh("present")
                self.emit(indent, f"{flag}, = {self.struct_const('b')}.unpack_from(buf, p)")
                self.emit(indent, "p += 1")
                self.emit(indent, f"if {flag} < 0:")
                self.emit(indent + 1, f"{dest} = None")
                self.emit(indent, "else:")
                indent += 1
            d = self.fresh("s")
            self.emit(indent, f"{d} = {{}}")
            self.gen_decode_fields(self.fields_of(field), indent, d)
            self.emit(indent, f"{dest} = {d}")

    def gen_decode_array(self, field: dict, indent: int, dest: str, flex: bool) -> None:
        elem = field["type"][2:]
        n = self.fresh("n")
        self.gen_length(indent, n, flex, int32=True)
        self.emit(indent, f"if {n} < 0:")
        self.emit(indent + 1, f"{dest} = None" if self.nullable(field) else "raise DecodeError('null array')")
        self.emit(indent, "else:")
        # every element takes at least one byte: a count larger than what is
        # left is hostile, and must be refused before the list is built
        self.emit(indent + 1, f"_check(p, {n}, end)")
        lst = self.fresh("a")
        self.emit(indent + 1, f"{lst} = []")
        self.emit(indent + 1, f"for _ in range({n}):")
        if elem in _FIXED or elem in ("string", "bytes", "uuid", "records"):
            item = self.fresh("v")
            self.gen_decode_value({"name": field["name"], "type": elem, "versions": "0+"}, indent + 2, item)
            self.emit(indent + 2, f"{lst}.append({item})")
        else:
            d = self.fresh("s")
            self.emit(indent + 2, f"{d} = {{}}")
            self.gen_decode_fields(self.fields_of(field), indent + 2, d)
            self.emit(indent + 2, f"{lst}.append({d})")
        self.emit(indent + 1, f"{dest} = {lst}")

    # ---- encoding ----
    def gen_encode_fields(self, fields: list, indent: int, src: str) -> None:
        run: list[tuple[str, str, str]] = []

        def flush_run():
            if not run:
                return
            fmt = "".join(f for _, f, _ in run)
            const = self.struct_const(fmt)
            args = ", ".join(f"{src}.get({k!r}, {d})" for k, _, d in run)
            self.emit(indent, f"w.buf += {const}.pack({args})")
            run.clear()

        tagged = []
        for field in fields:
            if not self.present(field):
                continue
            if self.tagged(field):
                tagged.append(field)
                continue
            key = snake(field["name"])
            if field["type"] in _FIXED:
                run.append((key, _FIXED[field["type"]], _default_literal(field)))
                continue
            flush_run()
            v = self.fresh("v")
            self.emit(indent, f"{v} = {src}.get({key!r}, {_default_literal(field)})")
            self.gen_encode_value(field, indent, v)
        flush_run()
        if self.flexible:
            self.gen_encode_tags(tagged, indent, src)

    def gen_encode_tags(self, tagged: list, indent: int, src: str) -> None:
        if not tagged:
            self.emit(indent, "w.buf.append(0)")
            return
        # tagged fields are written only when they differ from their default
        tags = self.fresh("tags")
        self.emit(indent, f"{tags} = []")
        for field in sorted(tagged, key=lambda f: f["tag"]):
            v = self.fresh("v")
            self.emit(indent, f"{v} = {src}.get({snake(field['name'])!r})")
            self.emit(indent, f"if {v} is not None and {v} != {_default_literal(field)}:")
            outer = self.fresh("outer")
            self.emit(indent + 1, f"{outer}, w = w, Writer()")
            self.gen_encode_value(field, indent + 1, v)
            self.emit(indent + 1, f"{outer}, w = w, {outer}")
            self.emit(indent + 1, f"{tags}.append(({field['tag']}, {outer}.getvalue()))")
        self.emit(indent, f"_w_uvarint(w.buf, len({tags}))")
        self.emit(indent, f"for tag, data in {tags}:")
        self.emit(indent + 1, "_w_uvarint(w.buf, tag)")
        self.emit(indent + 1, "_w_uvarint(w.buf, len(data))")
        self.emit(indent + 1, "w.buf += data")

    def gen_encode_length(self, indent: int, expr: str, flexible: bool, int32: bool) -> None:
        if flexible:
            self.emit(indent, f"_w_uvarint(w.buf, {expr} + 1)")
        else:
            self.emit(indent, f"w.buf += {self.struct_const('i' if int32 else 'h')}.pack({expr})")

    def gen_encode_value(self, field: dict, indent: int, v: str) -> None:
        ftype = field["type"]
        flex = self.field_flexible(field)
        if ftype in _FIXED:
            self.emit(indent, f"w.buf += {self.struct_const(_FIXED[ftype])}.pack({v})")
        elif ftype == "uuid":
            self.emit(indent, f"w.buf += _uuid_bytes({v})")
        elif ftype in ("string", "bytes", "records"):
            self.emit(indent, f"if {v} is None:")
            self.gen_encode_length(indent + 1, "-1", flex, ftype != "string")
            self.emit(indent, "else:")
            if ftype == "string":
                self.emit(indent + 1, f"{v} = {v}.encode('utf-8')")
            self.gen_encode_length(indent + 1, f"len({v})", flex, ftype != "string")
            self.emit(indent + 1, f"w.records({v})" if ftype == "records" else f"w.buf += {v}")
        elif ftype.startswith("[]"):
            elem = ftype[2:]
            self.emit(indent, f"if {v} is None:")
            self.gen_encode_length(indent + 1, "-1", flex, True)
            self.emit(indent, "else:")
            self.gen_encode_length(indent + 1, f"len({v})", flex, True)
            item = self.fresh("e")
            self.emit(indent + 1, f"for {item} in {v}:")
            if elem in _FIXED or elem in ("string", "bytes", "uuid", "records"):
                self.gen_encode_value({"name": field["name"], "type": elem, "versions": "0+"}, indent + 2, item)
            else:
                self.emit(indent + 2, f"if {item}.__class__ is Encoded:")
                self.emit(indent + 3, f"w.buf += {item}")
                self.emit(indent + 3, "continue")
                self.gen_encode_fields(self.fields_of(field), indent + 2, item)
        elif self.nullable(field):  # KIP-893: int8 -1 for null, else 1 and the struct
            self.emit(indent, f"if {v} is None:")
            self.emit(indent + 1, "w.buf.append(0xFF)")
            self.emit(indent, "else:")
            self.emit(indent + 1, "w.buf.append(1)")
            self.gen_encode_fields(self.fields_of(field), indent + 1, v)
        else:
            self.emit(indent, f"if {v} is None:")
            self.emit(indent + 1, f"{v} = {{}}")
            self.gen_encode_fields(self.fields_of(field), indent, v)

    # ---- assembly ----
    def build(self) -> tuple:
        fields = self.msg["fields"]
        self.emit(0, "def decode(buf, p=0, end=None):")
        self.emit(1, "if end is None: end = len(buf)")
        self.emit(1, "m = {}")
        self.emit(1, "try:")
        self.gen_decode_fields(fields, 2, "m")
        self.emit(1, "except struct.error as exc:")
        self.emit(2, "raise DecodeError(str(exc)) from None")
        self.emit(1, "except UnicodeDecodeError as exc:")
        self.emit(2, "raise DecodeError('invalid UTF-8') from None")
        self.emit(1, "return m, p")
        self.emit(0, "def encode(m, w):")
        self.gen_encode_fields(fields, 1, "m")
        self.emit(1, "return w")
        source = "\n".join(self.lines)
        namespace = dict(_RUNTIME, **self.consts)
        exec(compile(source, f"<codec {self.msg['name']} v{self.version}>", "exec"), namespace)
        return namespace["decode"], namespace["encode"]


@lru_cache(maxsize=None)
def codec(name: str, version: int) -> tuple:
    """(decode, encode) for a message at a version; compiled on first use."""
    if name not in _DEFS:
        raise KeyError(name)
    return _Compiler(name, version).build()


def decode(name: str, version: int, buf, pos: int = 0) -> tuple[dict, int]:
    return codec(name, version)[0](buf, pos)


def encode(name: str, version: int, message: dict, w: Writer | None = None) -> Writer:
    return codec(name, version)[1](message, w if w is not None else Writer())


def encode_bytes(name: str, version: int, message: dict) -> bytes:
    return encode(name, version, message).getvalue()
