"""Our own protobuf schema for the parts of XLA's protos that hold an HLO module.

The descriptors are built in code from the table in proto_schema.txt (no .proto file of XLA's, no generated
``_pb2`` module).  The field numbers and types are facts of XLA's wire format, read from XLA's
``xla/service/hlo.proto`` and ``xla/xla_data.proto``: HloModuleProto, HloProto (a module and its
buffer assignment), HloSnapshot (a module, the arguments of one execution and its result),
HloUnoptimizedSnapshot, and what they hold; of HloModuleConfigProto (``xla/xla.proto``, the
``config.pbtxt`` XLA dumps beside a module) the fields HLO text prints in a module's header.

A few fields are newer than those XLA sources (a fork's snapshot); their numbers come from the
descriptor of xla_data.proto that the XLA inside jaxlib 0.10.2 embeds (libjax_common.so):
PrimitiveType F6E3M2FN = 35 and F6E2M3FN = 36 with LiteralProto's f6e3m2fns = 35 / f6e2m3fns = 36,
OpMetadata.metadata_payload = 20 (a Payload), LiteralProto.dynamic_sizes = 34, and
MeshProto.iota_transform = 3 (reshape_dims = 1,
transpose_perm = 2: a mesh whose device order is an iota, printed ``device_ids=([2,4]T(1,0))``).

Two HloInstructionProto fields are newer still, seen in the .hlo.pb files XLA GPU in JAX 0.11.2
wrote (../shared/gpu/dumps) and in no XLA source we hold: 102, a string on every compare, "TOTAL",
"PARTIAL" (and XLA's third order, "WEAK"): the comparison order its text prints as ``order=``;
and 101, a message on every convolution, empty in each of those files (XLA's text of the same
modules prints nothing for it).  An empty one is read as absent; one with content is refused (its
meaning is unknown to us, so it may change what the convolution computes).

Table syntax: ``enum NAME`` then ``VALUE=N`` words; ``message NAME`` (nested messages as
``Outer.Inner``) then one field per line, ``NUMBER NAME TYPE`` where TYPE is a scalar type, an enum
or a message of the table, ``*TYPE`` for a repeated field, ``?TYPE`` for a proto3 optional one and
``{KEY,VALUE}`` for a map.  A field declared ``ignored`` is a message we do not read: it
is declared as bytes, so that its content is skipped as known (binary protos only).

    msgs = messages()                       # name -> message class
    m = msgs["HloModuleProto"]()
    m.ParseFromString(data)
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE = "xla"

def schema_text() -> str:
    """The table (proto_schema.txt beside this file: data, in the syntax described above)."""
    return (Path(__file__).resolve().parent / "proto_schema.txt").read_text(encoding="utf-8")

_SCALARS = {
    "double": 1, "float": 2, "int64": 3, "uint64": 4, "int32": 5, "bool": 8, "string": 9, "bytes": 12,
    "uint32": 13, "ignored": 12,
}
# messages whose content we never read; a field of ours of this name holds them as bytes
IGNORED = "ignored"


def _parse_schema(text: str):
    """[(kind, name, body)] in table order; body: enum (value, number) pairs or field tuples."""
    out = []
    for raw in text.strip("\n").split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(("enum ", "message ")):
            kind, name = line.split()
            out.append((kind, name, []))
        elif out[-1][0] == "enum":
            for word in line.split():
                k, v = word.split("=")
                out[-1][2].append((k, int(v)))
        else:
            number, name, typ = line.split()
            out[-1][2].append((int(number), name, typ))
    return out


def _file_descriptor():
    from google.protobuf import descriptor_pb2
    FDP = descriptor_pb2.FieldDescriptorProto
    table = _parse_schema(schema_text())
    enums = {name for kind, name, _ in table if kind == "enum"}
    fdp = descriptor_pb2.FileDescriptorProto(name="hlo_cli/xla_hlo_subset.proto", package=PACKAGE,
                                             syntax="proto3")
    # nested names (A.B) become nested types: enums inside messages too
    made: dict[str, object] = {}

    def container(name: str):
        if "." not in name:
            return fdp
        return made[name.rsplit(".", 1)[0]]

    # messages first (outer before inner), so nested enums find their message
    msg_order = [(n, body) for kind, n, body in table if kind == "message"]
    for name in sorted((n for n, _ in msg_order), key=lambda n: n.count(".")):
        parent = container(name)
        adder = parent.message_type if parent is fdp else parent.nested_type
        made[name] = adder.add(name=name.rsplit(".", 1)[-1])
    for kind, name, body in table:
        if kind != "enum":
            continue
        parent = container(name) if "." in name and name.rsplit(".", 1)[0] in made else fdp
        e = parent.enum_type.add(name=name.rsplit(".", 1)[-1])
        for k, v in body:
            e.value.add(name=k, number=v)
        if parent is fdp and "." in name:
            raise ValueError(f"enum {name}: no message {name.rsplit('.', 1)[0]}")
    # top-level enum values share the package's scope: ours do not clash (checked by protobuf)

    def type_ref(typ: str):
        if typ in _SCALARS:
            return _SCALARS[typ], None
        if typ in enums:
            return FDP.TYPE_ENUM, f".{PACKAGE}.{typ}"
        if typ in made:
            return FDP.TYPE_MESSAGE, f".{PACKAGE}.{typ}"
        raise ValueError(f"schema: unknown type {typ}")

    for name, body in msg_order:
        m = made[name]
        for number, fname, typ in body:
            f = m.field.add(name=fname, number=number)
            if typ.startswith("{"):
                key, value = typ[1:-1].split(",")
                entry = m.nested_type.add(name="".join(p.capitalize() for p in fname.split("_")) + "Entry")
                entry.options.map_entry = True
                for n, (ename, etyp) in enumerate((("key", key), ("value", value)), 1):
                    ef = entry.field.add(name=ename, number=n, label=FDP.LABEL_OPTIONAL)
                    ef.type, tn = type_ref(etyp)
                    if tn:
                        ef.type_name = tn
                f.label = FDP.LABEL_REPEATED
                f.type = FDP.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{name}.{entry.name}"
                continue
            repeated = typ.startswith("*")
            optional = typ.startswith("?")          # proto3 `optional`: presence is kept
            typ = typ.lstrip("*?")
            if optional:
                f.proto3_optional = True
                f.oneof_index = len(m.oneof_decl)
                m.oneof_decl.add(name="_" + fname)
            f.label = FDP.LABEL_REPEATED if repeated else FDP.LABEL_OPTIONAL
            f.type, tn = type_ref(typ)
            if tn:
                f.type_name = tn
    return fdp


@lru_cache(maxsize=None)
def messages() -> dict:
    """Message classes by name (nested ones as 'Outer.Inner')."""
    from google.protobuf import descriptor_pool, message_factory
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    fd = pool.FindFileByName("hlo_cli/xla_hlo_subset.proto")
    out = {}

    def walk(descs, prefix):
        for d in descs:
            full = prefix + d.name
            out[full] = message_factory.GetMessageClass(d)
            walk(d.nested_types, full + ".")

    walk(fd.message_types_by_name.values(), "")
    return out


def ignored_fields() -> set[tuple[str, str]]:
    """(message, field) pairs declared `ignored` in the table."""
    return {(name, fname) for kind, name, body in _parse_schema(schema_text()) if kind == "message"
            for _, fname, typ in body if typ.lstrip("*") == IGNORED}
