"""Our schema of XLA's protos (hlo_cli/sources/proto_schema.py) against XLA's own: the XLA inside
jaxlib embeds the descriptors of xla/xla_data.proto and xla/service/hlo.proto (serialized
FileDescriptorProtos in libjax_common.so).  Every message and field of ours must be XLA's, with
the same number, the same repeatedness and a wire-compatible type; every enum value ours names
must have XLA's number; and of the messages we read every field XLA has must be ours, so that a
proto XLA writes is never refused for a field we forgot.  Skipped without jaxlib."""
from __future__ import annotations

import os
import re

import pytest

from hlo_cli.sources.proto_schema import messages

# XLA messages we would read only in part, on purpose (none today: every message of ours holds
# all of XLA's fields)
PARTIAL: set[str] = {"HloModuleConfigProto"}   # only the fields HLO text prints in a module's header
# fields newer than this jaxlib's XLA, read from the protos XLA in JAX 0.11.2 writes (../shared/gpu):
# their numbers must be free in this jaxlib's descriptor
NEWER = {("HloInstructionProto", "convolution_field_101"): 101, ("HloInstructionProto", "comparison_order"): 102}


def _varint(b: bytes, i: int):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _file_descriptor(data: bytes, name: bytes):
    """The largest FileDescriptorProto named `name` serialized in `data` (None if none)."""
    from google.protobuf import descriptor_pb2
    found = []
    for m in re.finditer(b"\x0a" + bytes([len(name)]) + re.escape(name) + b"\x12", data):
        i = m.start()
        try:
            while i < len(data):                 # the message's fields, up to the first non-field
                tag, j = _varint(data, i)
                f, wt = tag >> 3, tag & 7
                if not 1 <= f <= 14 or wt not in (0, 2):
                    break
                if wt == 0:
                    _, j = _varint(data, j)
                else:
                    n, j = _varint(data, j)
                    j += n
                i = j
            fd = descriptor_pb2.FileDescriptorProto()
            fd.ParseFromString(data[m.start():i])
            found.append(fd)
        except Exception:
            continue
    return max(found, key=lambda f: len(f.message_type)) if found else None


pytestmark = pytest.mark.slow          # reads jaxlib's 100+ MB library


@pytest.fixture(scope="module")
def xla():
    jaxlib = pytest.importorskip("jaxlib")
    path = os.path.join(os.path.dirname(jaxlib.__file__), "libjax_common.so")
    if not os.path.exists(path):
        pytest.skip("no libjax_common.so in this jaxlib")
    data = open(path, "rb").read()
    msgs, enums = {}, {}

    def walk(ms, prefix):
        for m in ms:
            msgs[prefix + m.name] = m
            for e in m.enum_type:
                enums[prefix + m.name + "." + e.name] = e
            walk(m.nested_type, prefix + m.name + ".")
    for name in (b"xla/xla_data.proto", b"xla/service/hlo.proto", b"xla/xla.proto"):
        fd = _file_descriptor(data, name)
        if fd is None:
            pytest.skip(f"{name.decode()} not found in jaxlib")
        walk(fd.message_type, "")
        for e in fd.enum_type:
            enums[e.name] = e
    return msgs, enums


def test_every_field_of_ours_is_xlas(xla):
    from google.protobuf import descriptor_pb2
    T = descriptor_pb2.FieldDescriptorProto
    theirs, _ = xla
    wrong = []
    for name, cls in sorted(messages().items()):
        t = theirs.get(name)
        if t is None:
            wrong.append(f"message {name} is not XLA's")
            continue
        tf = {f.name: f for f in t.field}
        for f in cls.DESCRIPTOR.fields:
            x = tf.get(f.name)
            if (name, f.name) in NEWER:
                if f.number != NEWER[name, f.name] or f.number in {g.number for g in t.field}:
                    wrong.append(f"{name}.{f.name}: number {f.number} is taken in this jaxlib's XLA")
                continue
            if x is None:
                wrong.append(f"{name}.{f.name} is not XLA's")
                continue
            if x.number != f.number:
                wrong.append(f"{name}.{f.name}: number {f.number}, XLA's {x.number}")
            if (x.label == T.LABEL_REPEATED) != f.is_repeated:
                wrong.append(f"{name}.{f.name}: repeated differs")
            ours_len = f.type in (f.TYPE_MESSAGE, f.TYPE_BYTES, f.TYPE_STRING)
            theirs_len = x.type in (T.TYPE_MESSAGE, T.TYPE_BYTES, T.TYPE_STRING)
            if ours_len != theirs_len:
                wrong.append(f"{name}.{f.name}: wire type differs")
            elif f.type == f.TYPE_MESSAGE and x.type == T.TYPE_MESSAGE:
                if x.type_name.split(".xla.", 1)[-1].lstrip(".") != f.message_type.full_name[len("xla."):]:
                    wrong.append(f"{name}.{f.name}: {f.message_type.full_name} vs {x.type_name}")
        if name not in PARTIAL:
            for fname, x in tf.items():
                if fname not in {f.name for f in cls.DESCRIPTOR.fields}:
                    wrong.append(f"{name}.{fname} ({x.number}) of XLA's is missing from ours")
    assert not wrong, wrong


def test_every_enum_value_of_ours_is_xlas(xla):
    _, theirs = xla
    wrong = []
    seen = set()
    for cls in messages().values():
        for f in cls.DESCRIPTOR.fields:
            e = f.enum_type
            if e is None or e.full_name in seen:
                continue
            seen.add(e.full_name)
            name = e.full_name[len("xla."):]
            t = theirs.get(name) or theirs.get({"OpMetadataProfileType": "ProfileType"}.get(name, name))
            if t is None:
                wrong.append(f"enum {name} is not XLA's")
                continue
            tv = {v.name: v.number for v in t.value}
            for v in e.values:
                if tv.get(v.name) != v.number:
                    wrong.append(f"{name}.{v.name} = {v.number}, XLA's {tv.get(v.name)}")
    assert not wrong, wrong
