"""XLA's protos as sources of modules: HloModuleProto (``--xla_dump_hlo_as_proto`` writes
``*.hlo.pb``), HloProto (a module and its buffer assignment), HloSnapshot (``--xla_dump_hlo_snapshots``:
a module, the arguments of one execution and its result) and HloUnoptimizedSnapshot, in protobuf's
binary form (``.pb``) or text form (``.pbtxt``).

    fm = read_proto_modules("module_0000.jit_f.cpu_after_optimizations.hlo.pb")   # a FileModules
    snap = read_snapshot("module_0000.jit_f.snapshot.0.pb")
    snap.source, snap.arguments, snap.result, snap.platform

The module is decoded straight into the IR (proto_ir.py; ``ModuleSource.module``); its text is the
IR printer's (``ir.printer.format_module``): diagnostics about a module read from a proto point at
lines of that text, which ``hlo fmt FILE.pb`` shows.

What is refused (HloInputError, exit 2, naming the file): bytes that are not one of these messages
(a GraphDef, a random .pb), truncated or corrupt bytes, a field our schema does not know on a
message whose meaning it could change (an instruction, a computation, a shape, a layout, a
literal, an attribute; unknown fields of metadata and of the module's bookkeeping are harmless
and skipped), an opcode the IR does not know, and literals claiming more elements than hlo reads
or than their data holds.  Needs the ``protobuf`` package.

Codes (all exit 2): E083 protobuf text that holds no module; E084 bytes or text that are not a module
proto (wrong message, truncated, corrupt, a text-format error with its line); E085 an unknown field
that may change meaning; E086 an unknown opcode; E087 a module the proto cannot express as HLO
(an id naming nothing, an unknown element type or enum number, a name text cannot hold, a literal
too large or short of data); E088 a snapshot's argument or result literal; E089 protobuf missing.

Found on this machine: XLA CPU (jaxlib 0.10.2) writes ``module_NNNN.NAME.snapshot.N.pb``
(HloSnapshot: the after-optimizations module, the arguments, the result; execution_platform left
empty) with ``--xla_dump_hlo_snapshots``, ``module_NNNN.NAME.execution_NNNN.hlo_unoptimized_snapshot.pb``
with ``--xla_dump_hlo_unoptimized_snapshots``, and every ``.hlo.pb`` stage as an HloProto (the
after-optimizations one with its buffer assignment).  A compiled module's proto carries no module
config; its device assignment gives replica_count / num_partitions.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import Diagnostic, HloInputError

PROTO_SUFFIXES = (".pb", ".pbtxt", ".textproto")
TEXT_PROTO_SUFFIXES = (".pbtxt", ".textproto")

# the messages that hold a module, in the order a binary file is tried against them
_KINDS = ("HloSnapshot", "HloProto", "HloUnoptimizedSnapshot", "HloModuleProto")
# messages whose fields we do not know may be skipped: they never change what a module computes
_HARMLESS_UNKNOWN = {"OpMetadata", "HloModuleProto", "HloProto", "HloSnapshot", "HloUnoptimizedSnapshot",
                     "HloInputs", "HloInputs.LiteralDescriptor", "StackFrameIndexProto",
                     "StackFrameIndexProto.FileLocation", "StackFrameIndexProto.StackFrame",
                     "DeviceAssignmentProto", "DeviceAssignmentProto.ComputationDevice",
                     "OriginalValueProto", "OriginalValueElementProto", "OriginalArrayProto",
                     "OriginalValueRecoveryTableProto", "OriginalValueRecoveryTableProto.Entry",
                     "CrossProgramPrefetch", "HloBufferDonorProto", "HloBufferDonorProto.BufferDonorEntryProto",
                     "Payload", "ResultAccuracy.Tolerance", "OpMetadata.ProfileInfo", "HloModuleProto.ProfileInfo",
                     "BufferAssignmentProto", "BufferAssignmentProto.BufferAlias", "BufferAssignmentProto.PeakBuffers",
                     "LogicalBufferProto", "LogicalBufferProto.Location", "BufferAllocationProto",
                     "BufferAllocationProto.Assigned", "HeapSimulatorTrace", "HeapSimulatorTrace.Event",
                     "StatisticsViz", "Statistic"}


@dataclass(frozen=True)
class Snapshot:
    """An HloSnapshot: the module, the arguments of one execution (in parameter order) and its
    result (None when the snapshot holds none), and the platform it ran on."""
    source: object                   # ModuleSource
    arguments: list
    result: object
    platform: str | None
    kind: str = "HloSnapshot"        # or HloProto / HloModuleProto / HloUnoptimizedSnapshot (no arguments)


def is_proto_path(path: str) -> bool:
    return path != "-" and Path(path).suffix.lower() in PROTO_SUFFIXES


def _error(name: str, message: str, code: str = "E084") -> HloInputError:
    return HloInputError(f"{name}: {message}", [Diagnostic(message, name, code=code)])


def _protobuf_missing(name: str) -> HloInputError:
    return _error(name, "reading XLA's protos needs the 'protobuf' package (pip install protobuf)", "E089")


def read_bytes(path: str) -> tuple[bytes, str]:
    """The file's bytes ('-': standard input) and its display name.  Raises HloInputError; bytes
    that cannot begin a module proto (binary or text) are refused from the file's first block,
    before the rest is read."""
    import sys
    from .reading import CONTROL_BYTE, SNIFF_BYTES, NotRegularFile, open_regular
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        with open_regular(path) as f:
            data = f.read(SNIFF_BYTES)
            size = os.fstat(f.fileno()).st_size
            if CONTROL_BYTE.search(data) and not plausible_binary_proto(data, size):
                raise _error(path, "not an XLA module proto: binary data whose first bytes do not begin a "
                                   "protobuf message (an HloModuleProto, HloProto or HloSnapshot)", "E084")
            data += f.read()
    except NotRegularFile as e:
        raise _error(path, f"is {e.kind}, not a regular file", "E011" if e.kind == "a directory" else "E018") from None
    except FileNotFoundError:
        raise _error(path, "no such file", "E012") from None
    except PermissionError:
        raise _error(path, "permission denied", "E013") from None
    except IsADirectoryError:
        raise _error(path, "is a directory, not an HLO file", "E011") from None
    except OSError as e:
        raise _error(path, f"cannot read: {e.strerror}", "E014") from None
    if not data.strip():
        raise _error(path, "the file is empty: expected an HLO module", "E001")
    return data, path


# ----------------------------------------------------------------------------- decoding

def _messages(name: str):
    try:
        from .proto_schema import messages
        return messages()
    except ImportError:
        raise _protobuf_missing(name) from None


def _module_of(kind: str, msg):
    if kind == "HloSnapshot":
        return msg.hlo.hlo_module
    if kind in ("HloProto", "HloUnoptimizedSnapshot"):
        return msg.hlo_module
    return msg


def _looks_like_module(m) -> bool:
    if not len(m.computations):
        return False
    for c in m.computations:
        if not c.name or not len(c.instructions):
            return False
        for i in c.instructions:
            if not i.name or not i.opcode:
                return False
    return True


def _unknown_fields(msg, kind: str):
    """(message type, field numbers, where) of the first message with unknown fields that may
    change meaning, or None.  Walks the message only when it holds unknown fields at all."""
    probe = type(msg)()
    probe.CopyFrom(msg)
    probe.DiscardUnknownFields()
    if probe.ByteSize() == msg.ByteSize():
        return None
    from google.protobuf import unknown_fields as uf
    prefix = "xla."

    def walk(m, where):
        tname = m.DESCRIPTOR.full_name[len(prefix):]
        unknown = uf.UnknownFieldSet(m)
        if len(unknown) and tname not in _HARMLESS_UNKNOWN:
            return tname, sorted({f.field_number for f in unknown}), where
        if tname in ("HloModuleProto",):
            pass
        for fd, value in m.ListFields():
            if fd.message_type is None:
                continue
            items = value if fd.is_repeated else [value]
            if fd.message_type.GetOptions().map_entry:
                items = [value[k] for k in value] if fd.message_type.fields_by_name["value"].message_type else []
            for k, v in enumerate(items):
                here = where
                nm = getattr(v, "name", None) if fd.name in ("computations", "instructions") else None
                if fd.name == "computations":
                    here = f"computation {nm}"
                elif fd.name == "instructions":
                    here = f"{where}, instruction {nm}"
                found = walk(v, here)
                if found:
                    return found
        return None

    return walk(msg, kind)


def decode(data: bytes, name: str, text: bool | None = None):
    """(kind, message) for a file's bytes: the first of HloSnapshot, HloProto,
    HloUnoptimizedSnapshot, HloModuleProto that reads them and holds a module.  `text`: protobuf's
    text format (None: decide from the bytes).  Raises HloInputError."""
    msgs = _messages(name)
    if text is None:
        text = _looks_like_text_proto(data)
    if text:
        return _decode_text(data, name, msgs)
    from google.protobuf.message import DecodeError
    errors = []
    fallback = None
    for kind in _KINDS:
        msg = msgs[kind]()
        try:
            msg.ParseFromString(data)
        except (DecodeError, RuntimeError, ValueError, RecursionError, OverflowError) as e:
            errors.append(f"{kind}: {e}")
            continue
        from google.protobuf import unknown_fields as uf
        if _looks_like_module(_module_of(kind, msg)):
            if not len(uf.UnknownFieldSet(msg)):
                _check_unknown(msg, kind, name)
                return kind, msg
            fallback = fallback or (kind, msg)     # top-level fields we do not know: try the others first
    if fallback is not None:
        _check_unknown(fallback[1], fallback[0], name)
        return fallback
    what = "truncated or corrupt protobuf bytes" if all("rror" in e or "runcated" in e for e in errors) and \
        len(errors) == len(_KINDS) else "not an XLA module proto"
    raise _error(name, f"{what}: the bytes do not read as an HloModuleProto, HloProto or HloSnapshot holding "
                       "an HLO module (a TensorFlow GraphDef, another message, or a cut-off file?)", "E084")


def _check_unknown(msg, kind: str, name: str):
    found = _unknown_fields(msg, kind)
    if found:
        tname, numbers, where = found
        nums = ", ".join(map(str, numbers))
        raise _error(name, f"{where}: field number{'s' if len(numbers) > 1 else ''} {nums} of xla.{tname} "
                           "not in hlo's schema of XLA's protos (written by a newer XLA?); it may change what "
                           "the module means, so it is not read", "E085")


def _varint(data: bytes, pos: int) -> tuple[int | None, int]:
    """(value, position after it) of the varint at POS; (None, len(data)) when DATA ends inside
    it, (None, -1) when it is longer than 10 bytes."""
    value, shift = 0, 0
    for k in range(pos, min(len(data), pos + 10)):
        b = data[k]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, k + 1
        shift += 7
    return None, (len(data) if len(data) < pos + 10 else -1)


def plausible_binary_proto(head: bytes, size: int) -> bool:
    """Whether HEAD (the first bytes of SIZE) can begin a protobuf message: each field a tag of a
    field number >= 1 and a wire type protobuf writes, each length within the bytes there are (up
    to 64 fields; what HEAD cuts off counts as plausible).  No decoding: no protobuf needed."""
    pos, n = 0, len(head)
    for _ in range(64):
        if pos >= n:
            return pos <= size
        tag, pos = _varint(head, pos)
        if tag is None:
            return pos >= n
        field, wire = tag >> 3, tag & 7
        if field == 0 or wire not in (0, 1, 2, 5):
            return False
        if wire == 0:
            v, pos = _varint(head, pos)
            if v is None:
                return pos >= n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            length, pos = _varint(head, pos)
            if length is None:
                return pos >= n
            pos += length
            if pos > size:
                return False
    return pos <= size


def _looks_like_text_proto(data: bytes) -> bool:
    head = data[:4096]
    if b"\x00" in head:
        return False
    try:
        s = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return re.search(r"^\s*((#|//).*\n\s*)*[A-Za-z_]\w*\s*[:{]", s) is not None


def _decode_text(data: bytes, name: str, msgs):
    from google.protobuf import text_format
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(name, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", "E016") from None
    s = re.sub(r"(?m)^[ \t]*#.*$", "", s)           # comments (lines keep their places)
    first = re.search(r"^\s*([A-Za-z_]\w*)\s*[:{]", s, re.M)
    field = first.group(1) if first else ""
    order = {"hlo": ("HloSnapshot",), "hlo_module": ("HloProto", "HloUnoptimizedSnapshot")}.get(
        field, ("HloModuleProto",))
    first_error = None
    for kind in order:
        msg = msgs[kind]()
        try:
            text_format.Parse(s, msg)
        except text_format.ParseError as e:
            first_error = first_error or e
            continue
        except (RecursionError, ValueError, RuntimeError, OverflowError) as e:   # nesting, bad values
            first_error = first_error or e
            continue
        if not _looks_like_module(_module_of(kind, msg)):
            line = s.count("\n", 0, first.start(1)) + 1 if first else 0
            m = (f"this {kind} in protobuf's text format holds no HLO module (an HloModuleProto with "
                 "computations of named instructions)")
            raise HloInputError(f"{name}: {m}", [Diagnostic(m, name, line, 1 if line else 0, code="E083")])
        return kind, msg
    line = getattr(first_error, "GetLine", lambda: 0)() or 0
    col = getattr(first_error, "GetColumn", lambda: 0)() or 0
    msg = f"not an XLA module in protobuf's text format ({order[0]}): {first_error}"
    raise HloInputError(f"{name}: {msg}", [Diagnostic(msg, name, line, col, code="E084")])


# ----------------------------------------------------------------------------- modules

def _module_source(module, name: str, config=None):
    from ..ir.opcodes import OPCODES
    from .proto_shape import ProtoError
    from .proto_ir import located_text, module_ir
    for c in module.computations:
        for i in c.instructions:
            if i.opcode not in OPCODES:
                raise _error(name, f"computation {c.name}, instruction {i.name}: opcode '{i.opcode}' is not one "
                                   "hlo knows (written by a newer XLA?)", "E086")
    try:
        ir, text = located_text(module_ir(module, name, config=config))
    except ProtoError as e:
        raise _error(name, str(e), "E087") from None
    except RecursionError:
        raise _error(name, "the module nests too deeply to be read", "E087") from None
    return _file_modules(ir, text, name, module.name or None)


def _file_modules(ir, text: str, name: str, label: str | None):
    from .modules import FileModules, ModuleSource
    from .split import SINGLE, Region
    src = ModuleSource(name, 0, 1, Region(0, len(text), 1, label), text, ir)
    return FileModules(name, text, SINGLE, (src,), ())


def proto_modules(data: bytes, name: str, text: bool | None = None, config=None, use_cache: bool = True):
    """FileModules for a proto file's bytes: one module, or, for protobuf text split like an XLA
    lit test (modules between lines `// -----`, `//` comment lines; XLA's hlo-translate tests), one
    per part.  CONFIG: the module's HloModuleConfigProto (module_config), for its header.  One module
    is decoded through the on-disk cache (sources/cache.py's cached_proto) unless USE_CACHE is False.
    Raises HloInputError."""
    size = len(data)
    if text is None:
        text = _looks_like_text_proto(data)
    if text:
        parts = _lit_parts(data, name)
        if len(parts) > 1:
            return replace(_lit_modules(parts, name), file_size=size)
        data = parts[0].encode("utf-8")

    def decoded():
        kind, msg = decode(data, name, text)
        src = _module_source(_module_of(kind, msg), name, config).modules[0]
        return src.module, [src.text, src.region.name]
    from .cache import cached_proto
    ir, (mtext, label) = cached_proto(data, name, config.SerializeToString() if config is not None else b"",
                                      decoded, use_cache)
    return replace(_file_modules(ir, mtext, name, label), file_size=size)


_LIT_SEP = re.compile(r"^//[ \t]*-----[ \t]*\r?$", re.M)
_SLASH_COMMENT = re.compile(r"^[ \t]*//.*$", re.M)


def _lit_parts(data: bytes, name: str) -> list[str]:
    """The parts of a protobuf text between `// -----` lines, `//` comments blanked and each part
    keeping its lines' numbers (blank lines before it)."""
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _error(name, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", "E016") from None
    if "//" not in s:
        return [s]
    out, pos = [], 0
    bounds = [(m.start(), m.end()) for m in _LIT_SEP.finditer(s)] + [(len(s), len(s))]
    for start, end in bounds:
        part = _SLASH_COMMENT.sub("", s[pos:start])
        if part.strip():
            out.append("\n" * s.count("\n", 0, pos) + part)
        pos = end
    return out or [s]


def _lit_modules(parts: list[str], name: str):
    from .modules import FileModules, ModuleSource
    from .split import LIT
    mods = []
    for k, part in enumerate(parts):
        kind, msg = decode(part.encode("utf-8"), name, True)
        one = _module_source(_module_of(kind, msg), name).modules[0]
        mods.append(ModuleSource(name, k, len(parts), one.region, one.file_text, one.module))
    return FileModules(name, "\n".join(m.file_text for m in mods), LIT, tuple(mods), ())


def read_proto_modules(path: str, use_cache: bool = True):
    """FileModules for an HloModuleProto / HloProto / HloSnapshot file.  A stage of an XLA dump
    directory (module_NNNN.NAME.STAGE.hlo.pb) takes its header's config (replica_count,
    num_partitions, the entry layout...) from the module's config.pbtxt beside it when XLA wrote one
    (--xla_dump_full_hlo_config; the module proto holds no config).  Raises HloInputError."""
    data, name = read_bytes(path)
    text = True if Path(path).suffix.lower() in TEXT_PROTO_SUFFIXES else None
    config = None
    if path != "-":
        from .dumpdir import config_beside
        beside = config_beside(path)
        if beside is not None:
            config = read_module_config(beside)
    return proto_modules(data, name, text, config, use_cache)


def read_module_proto(path: str):
    """(the HloModuleProto message of a proto file, its display name, the HloModuleConfigProto beside it
    or None): what proto_ir.module_ir decodes.  Raises HloInputError."""
    data, name = read_bytes(path)
    text = True if Path(path).suffix.lower() in TEXT_PROTO_SUFFIXES else None
    if text is None and _looks_like_text_proto(data):
        text = True
    if text:
        data = _lit_parts(data, name)[0].encode("utf-8")
    kind, msg = decode(data, name, text)
    config = None
    if path != "-":
        from .dumpdir import config_beside
        beside = config_beside(path)
        if beside is not None:
            config = read_module_config(beside)
    return _module_of(kind, msg), name, config


def read_module_config(path: str):
    """The HloModuleConfigProto of an XLA dump's config.pbtxt (protobuf text; binary also read): the
    fields HLO text prints in a module's header (proto_schema's subset; the others, such as the debug
    options, are skipped).  Raises HloInputError (E084) for a file that does not read as one."""
    data, name = read_bytes(path)
    msgs = _messages(name)
    msg = msgs["HloModuleConfigProto"]()
    try:
        if _looks_like_text_proto(data):
            from google.protobuf import text_format
            text_format.Parse(data.decode("utf-8"), msg, allow_unknown_field=True)
        else:
            msg.ParseFromString(data)
    except Exception as e:       # noqa: BLE001 -- protobuf's parse errors, bad UTF-8, nesting
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _error(name, f"not a module config (HloModuleConfigProto) in protobuf's format: {why}") from None
    return msg


def read_snapshot(path: str) -> Snapshot:
    """The module, arguments and result of an HloSnapshot file (binary or text format).  Any other
    module proto reads as a Snapshot without arguments or result.  Raises HloInputError."""
    from .proto_literal import literal_to_numpy
    from .proto_shape import ProtoError
    data, name = read_bytes(path)
    text = True if Path(path).suffix.lower() in TEXT_PROTO_SUFFIXES else None
    kind, msg = decode(data, name, text)
    fm = _module_source(_module_of(kind, msg), name)
    args, result, platform = [], None, None
    try:
        if kind == "HloSnapshot":
            args = [literal_to_numpy(a, f"argument {k}: ") for k, a in enumerate(msg.arguments)]
            if msg.HasField("result"):
                result = literal_to_numpy(msg.result, "result: ")
            platform = msg.execution_platform or None
        elif kind == "HloUnoptimizedSnapshot" and len(msg.partitions):
            args = [literal_to_numpy(a, f"argument {k}: ") for k, a in enumerate(msg.partitions[0].arguments)]
    except ProtoError as e:
        raise _error(name, str(e), "E088") from None
    return Snapshot(fm.modules[0], args, result, platform, kind)


# ----------------------------------------------------------------------------- writing

def encode_snapshot(module_proto: bytes, arguments, result=None, platform: str | None = None) -> bytes:
    """An HloSnapshot's bytes from a serialized HloModuleProto (XLA's
    `as_serialized_hlo_module_proto()`), argument arrays and an optional result."""
    from .proto_literal import literal_from_numpy
    from .proto_schema import messages
    msgs = messages()
    snap = msgs["HloSnapshot"]()
    snap.hlo.hlo_module.ParseFromString(module_proto)
    for a in arguments:
        snap.arguments.append(literal_from_numpy(a))
    if result is not None:
        snap.result.CopyFrom(literal_from_numpy(result))
    if platform:
        snap.execution_platform = platform
    return snap.SerializeToString()
