"""Typed attribute values, their decoders from the parser's generic values, and their text form.

The grammar reads every attribute value into a small generic structure (words,
quoted strings, shapes, integer lists and {}/[]/() groups); the opcode table
names the *kind* of each attribute and `decode(kind, value)` turns the generic
value into one of the typed values below.  `str(value)` gives XLA's spelling.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .shape import Shape


class AttrError(ValueError):
    """A malformed attribute value; the parser adds the location.

    `at` names the part of the value at fault when it is not the value as a whole: a word, or a
    generic value (Word, KV, Group, ...), located by the parser as the `nth` (0-based) token of
    the value's text spelled like it (see `value_tokens`)."""

    def __init__(self, message: str, at=None, nth: int = 0):
        super().__init__(message)
        self.at = at
        self.nth = nth


_VALUE_TOKEN = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|<=|->|[{}\[\](),=:<]|[^\s{}\[\](),="<:]+')


def value_tokens(text: str):
    """(token, offset) of the tokens of an attribute value's source text, comments skipped."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = len(text) if j < 0 else j + 2
            continue
        if text[i].isspace():
            i += 1
            continue
        m = _VALUE_TOKEN.match(text, i)
        if m is None:
            out.append((text[i], i))
            i += 1
            continue
        out.append((m.group(0), i))
        i = m.end()
    return out


def needle_of(at) -> str | None:
    """The token that starts `at` in source text (see AttrError)."""
    if at is None:
        return None
    if isinstance(at, Quoted):
        return at.raw
    if isinstance(at, KV):
        return at.key
    if isinstance(at, Group):
        return at.open
    if isinstance(at, IntList):
        return "{"
    if isinstance(at, Seq):
        return needle_of(at.items[0]) if at.items else None
    return str(at)


def nth_among(items, item, needle: str | None = None) -> int:
    """How many tokens of the generic values before `item` in `items` (its siblings) are spelled
    like `needle` (default: the first token of `item`): the `nth` of an AttrError."""
    needle = needle_of(item) if needle is None else needle
    n = 0
    for it in items:
        if it is item:
            break
        n += sum(1 for t, _ in value_tokens(generic_text(it)) if t == needle)
    return n


# ----------------------------------------------------------------------------- generic values

class Word(str):
    """A bare word: 3x3, kLoop, %comp, b01f_01io->b01f, true, -1."""


class Quoted(str):
    """A quoted string, unescaped; `raw` keeps the source spelling."""
    raw: str

    def __new__(cls, value: str, raw: str | None = None):
        obj = super().__new__(cls, value)
        obj.raw = raw if raw is not None else quote(value)
        return obj


class IntList(tuple):
    """{1,2,3}"""


@dataclass(frozen=True)
class Group:
    open: str                 # '{', '[' or '('
    items: tuple
    text: str = field(default="", compare=False)   # the source text of the whole group
    depth: int = field(default=1, compare=False, repr=False)   # how deeply groups nest in it

    def values(self):
        """Items without separators."""
        return [i for i in self.items if not isinstance(i, Sep)]


@dataclass(frozen=True)
class KV:
    key: str
    value: Any


class Sep(str):
    """',' or '<=' inside a group or attribute value sequence."""


@dataclass(frozen=True)
class Seq:
    """Juxtaposed values of one attribute: [2,4]<=[8]T(1,0)."""
    items: tuple


def cescape(s: str) -> str:
    """absl::CEscape as XLA uses it for quoted strings, on characters rather than bytes.

    Characters from U+0080 up are written as they are (the IR's strings are text,
    and the parser reads an octal escape as one code point, not one byte)."""
    out = []
    for ch in s:
        esc = _CESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch < "\x20" or ch == "\x7f":
            out.append("\\%03o" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


_CESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "'": "\\'", "\\": "\\\\"}


def quote(s: str) -> str:
    """`s` as a quoted HLO string."""
    return '"' + cescape(s) + '"'


_ESC = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "?": "?", "a": "\a",
           "b": "\b", "f": "\f", "v": "\v"}


def unquote(raw: str) -> str:
    body = raw[1:-1]
    if "\\" not in body:
        return body

    def sub(m):
        e = m.group(1)
        if e[0] == "x":
            return chr(int(e[1:], 16))
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _SIMPLE.get(e, e)
    return _ESC.sub(sub, body)


def generic_text(v) -> str:
    """Canonical text of a generic value (used for 'raw' kinds and messages)."""
    if isinstance(v, Quoted):
        return v.raw
    if isinstance(v, IntList):
        return "{" + ",".join(map(str, v)) + "}"
    if isinstance(v, Shape):
        return str(v)
    if isinstance(v, Group):
        close = {"{": "}", "[": "]", "(": ")"}[v.open]
        parts, prev_sep = [], True
        for it in v.items:
            if isinstance(it, Sep):
                parts.append(str(it))
                prev_sep = True
                continue
            if not prev_sep:
                parts.append(" ")
            parts.append(generic_text(it))
            prev_sep = False
        return v.open + "".join(parts) + close
    if isinstance(v, KV):
        return f"{v.key}={generic_text(v.value)}"
    if isinstance(v, Seq):
        return "".join(generic_text(i) for i in v.items)
    if isinstance(getattr(v, "shape", None), Shape) and isinstance(getattr(v, "text", None), str):
        # the parser's LiteralValue (`literal=s32[2]{0} {7, 8}`): shape, then the literal
        return f"{v.shape} {v.text}"
    return str(v)


# ----------------------------------------------------------------------------- typed values

@dataclass(frozen=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False


@dataclass(frozen=True)
class Window:
    dimensions: tuple[WindowDim, ...] = ()

    def __str__(self) -> str:
        ds = self.dimensions
        if not ds:
            return "{}"
        parts = ["size=" + "x".join(str(d.size) for d in ds)]
        if any(d.stride != 1 for d in ds):
            parts.append("stride=" + "x".join(str(d.stride) for d in ds))
        if any(d.padding_low or d.padding_high for d in ds):
            parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in ds))
        if any(d.base_dilation != 1 for d in ds):
            parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in ds))
        if any(d.window_dilation != 1 for d in ds):
            parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in ds))
        if any(d.window_reversal for d in ds):
            parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in ds))
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True)
class ConvDimensionNumbers:
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]

    def __str__(self) -> str:
        # XLA's ConvolutionDimensionNumbersToString: each part is as long as its highest dimension
        # number needs, positions nobody names print as '?' (custom calls may leave some unknown)
        def render(named, spatial):
            chars = ["?"] * (max([p for p, _ in named] + list(spatial) + [0]) + 1)
            for pos, ch in named:
                if pos >= 0:
                    chars[pos] = ch
            for k, pos in enumerate(spatial):
                if pos >= 0:
                    chars[pos] = str(k) if k < 10 else f"[{k}]"   # XLA spells only single digits
            return "".join(chars)
        lhs = render([(self.input_batch_dimension, "b"), (self.input_feature_dimension, "f")],
                     self.input_spatial_dimensions)
        rhs = render([(self.kernel_input_feature_dimension, "i"), (self.kernel_output_feature_dimension, "o")],
                     self.kernel_spatial_dimensions)
        out = render([(self.output_batch_dimension, "b"), (self.output_feature_dimension, "f")],
                     self.output_spatial_dimensions)
        return f"{lhs}_{rhs}->{out}"


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class SliceSpec:
    dimensions: tuple[SliceDim, ...]

    def __str__(self) -> str:
        # XLA writes the strides of every dimension as soon as one of them is not 1
        strided = any(d.stride != 1 for d in self.dimensions)
        return "{" + ", ".join(
            f"[{d.start}:{d.limit}" + (f":{d.stride}]" if strided else "]")
            for d in self.dimensions) + "}"


@dataclass(frozen=True)
class PaddingDim:
    low: int = 0
    high: int = 0
    interior: int = 0


@dataclass(frozen=True)
class PaddingConfig:
    dimensions: tuple[PaddingDim, ...]

    def __str__(self) -> str:
        interior = any(d.interior for d in self.dimensions)
        return "x".join(f"{d.low}_{d.high}" + (f"_{d.interior}" if interior else "")
                        for d in self.dimensions)


@dataclass(frozen=True)
class IotaReplicaGroups:
    """[g,n]<=[dims]T(perm): group g's members are row g of iota(dims) transposed by perm, reshaped."""
    group_shape: tuple[int, int]
    reshape_dims: tuple[int, ...]
    transpose_perm: tuple[int, ...] = ()

    def groups(self) -> tuple[tuple[int, ...], ...]:
        import numpy as np
        n = 1
        for d in self.reshape_dims:
            n *= d
        a = np.arange(n).reshape(self.reshape_dims)
        if self.transpose_perm:
            a = a.transpose(self.transpose_perm)
        a = a.reshape(self.group_shape)
        return tuple(tuple(int(x) for x in row) for row in a)

    def __str__(self) -> str:
        s = f"[{','.join(map(str, self.group_shape))}]<=[{','.join(map(str, self.reshape_dims))}]"
        if self.transpose_perm:
            s += f"T({','.join(map(str, self.transpose_perm))})"
        return s


@dataclass(frozen=True)
class ReplicaGroups:
    groups: tuple[tuple[int, ...], ...]

    def __str__(self) -> str:
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.groups) + "}"


@dataclass(frozen=True)
class MeshAxis:
    """One axis a mesh replica group varies: mesh axis `index`, or its sub-axis `:(pre_size)size`
    (the `size` devices of stride `pre_size` along that axis)."""
    index: int
    pre_size: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class MeshReplicaGroups:
    """XLA's MeshAxesReplicaGroupList, `mesh['x'=2,'y'=4] {'y'}`: the devices of a mesh of the
    given axis sizes (numbered in order, or as `device_ids` lists them) form groups that vary the
    listed axes and hold the other axes fixed."""
    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    axes: tuple[MeshAxis, ...]
    device_ids: tuple[int, ...] | None = None     # explicit device order (row-major over the axes)

    def _axis_size(self, a: MeshAxis) -> int:
        return a.size if a.size is not None else self.axis_sizes[a.index]

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """XLA's flattened_replica_groups: split each mesh axis into the sub-axes the groups name,
        move the grouped (sub-)axes last, in the order listed, and cut the device order into groups."""
        import numpy as np
        dims: list[int] = []
        grouped_at: dict[int, int] = {}           # position in self.axes -> reshaped dimension
        for i, full in enumerate(self.axis_sizes):
            mine = [(k, a) for k, a in enumerate(self.axes) if a.index == i]
            if not mine:
                dims.append(full)
                continue
            if len(mine) == 1 and mine[0][1].pre_size is None:
                grouped_at[mine[0][0]] = len(dims)
                dims.append(full)
                continue
            covered = 1
            for k, a in sorted(mine, key=lambda ka: ka[1].pre_size or 1):
                pre = a.pre_size or 1
                if pre != covered:                # the devices between the sub-axes
                    dims.append(pre // covered)
                    covered = pre
                grouped_at[k] = len(dims)
                dims.append(self._axis_size(a))
                covered *= self._axis_size(a)
            if covered != full:
                dims.append(full // covered)
        n = 1
        for d in self.axis_sizes:
            n *= d
        devices = np.arange(n) if self.device_ids is None else np.array(self.device_ids)
        grouped = [grouped_at[k] for k in range(len(self.axes))]
        order = [d for d in range(len(dims)) if d not in grouped] + grouped
        size = 1
        for a in self.axes:
            size *= self._axis_size(a)
        flat = devices.reshape(dims).transpose(order).reshape(-1, size)
        return tuple(tuple(int(x) for x in row) for row in flat)

    def __str__(self) -> str:
        mesh = "mesh[" + ",".join(f"'{n}'={z}" for n, z in zip(self.axis_names, self.axis_sizes)) + "]"
        if self.device_ids is not None:
            mesh += ", device_ids=(" + ",".join(map(str, self.device_ids)) + ")"
        axes = []
        for a in self.axes:
            t = f"'{self.axis_names[a.index]}'"
            if a.pre_size is not None:
                t += f":({a.pre_size}){a.size}"
            axes.append(t)
        return mesh + " {" + ",".join(axes) + "}"


@dataclass(frozen=True)
class TileAssignment:
    dims: tuple[int, ...]
    devices: tuple[int, ...] | None = None          # explicit device list
    iota: IotaReplicaGroups | None = None           # or iota form: [dims]<=[reshape]T(perm)

    def __str__(self) -> str:
        d = "[" + ",".join(map(str, self.dims)) + "]"
        if self.iota is not None:
            s = d + "<=[" + ",".join(map(str, self.iota.reshape_dims)) + "]"
            if self.iota.transpose_perm:
                s += "T(" + ",".join(map(str, self.iota.transpose_perm)) + ")"
            return s
        return d + ",".join(map(str, self.devices or ()))


@dataclass(frozen=True)
class Sharding:
    """An HloSharding: replicated, maximal, manual, unknown, tiled, or a tuple of shardings."""
    kind: str                                   # replicated | maximal | manual | unknown | tiled | tuple | unreduced
    device: int | None = None                   # maximal
    tile_assignment: TileAssignment | None = None
    last_tile_dim_replicate: bool = False
    last_tile_dims: tuple[str, ...] = ()        # subgroup types: manual, replicated, ...
    elements: tuple["Sharding", ...] = ()       # tuple shardings
    shard_group: str | None = None              # "shard_as 1" / "shard_like 2"
    metadata: tuple[str, ...] = ()              # raw metadata texts
    extra: tuple[str, ...] = ()                 # other words kept verbatim

    def __str__(self) -> str:
        if self.kind == "tuple":
            return "{" + ", ".join(str(e) for e in self.elements) + "}"
        if self.kind == "raw":
            return self.extra[0]
        if (self.kind in ("replicated", "manual", "unreduced", "unknown") and len(self.extra) >= 2
                and self.extra[0] == "mesh" and self.extra[1].startswith("[")):
            # a named sharding read as kind + extra words: {mesh[...], replicated, ...}
            named = ["mesh" + self.extra[1], self.kind, *self.extra[2:]]
            named += [f"metadata={_metadata_list_text(m)}" for m in self.metadata]
            return "{" + ", ".join(named) + "}"
        parts: list[str] = []
        if self.kind == "maximal":
            parts.append(f"maximal device={self.device}")
        elif self.kind == "tiled":
            parts.append(f"devices={self.tile_assignment}")
            if self.last_tile_dim_replicate:
                parts.append("last_tile_dim_replicate")
            if self.last_tile_dims:
                parts.append("last_tile_dims={" + ", ".join(self.last_tile_dims) + "}")
        else:
            parts.append(self.kind)
        parts.extend(self.extra)
        if self.shard_group:
            parts.append(self.shard_group)
        for m in self.metadata:
            parts.append(f"metadata={_metadata_list_text(m)}")
        return "{" + " ".join(parts) + "}"


def _metadata_list_text(m: str) -> str:
    """A sharding's metadata list as XLA spells it: {{op_name="a"}, {op_type="b"}}."""
    if not m.startswith("{{"):
        return m
    parts, depth, start, quote_ch, k = [], 0, 1, None, 0
    while k < len(m):
        ch = m[k]
        if quote_ch:
            if ch == "\\":
                k += 1
            elif ch == quote_ch:
                quote_ch = None
        elif ch in "\"'":
            quote_ch = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == "," and depth == 1:
            parts.append(m[start:k].strip())
            start = k + 1
        k += 1
    parts.append(m[start:-1].strip())
    return "{" + ", ".join(parts) + "}"


# (a quoted value as `"[^"\\]*+(?:\\.[^"\\]*+)*+"`: one step per run of plain characters; the
# alternation `(?:[^"\\]|\\.)*` kept a backtracking state per character, 180 bytes each: a 5 MB op_name
# took 900 MB)
_MD_FIELD = re.compile(r'\s*([A-Za-z_][\w]*)=("[^"\\]*+(?:\\.[^"\\]*+)*+"|\{[^{}]*\}|[^\s}]+)')


@dataclass(frozen=True)
class Metadata:
    """metadata={...}, kept as its source text and decoded on demand."""
    text: str            # including the braces

    @cached_property
    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        body = self.text[1:-1]
        for m in _MD_FIELD.finditer(body):
            k, v = m.group(1), m.group(2)
            if v.startswith('"'):
                out[k] = unquote(v)
            else:
                try:
                    out[k] = int(v)
                except ValueError:
                    out[k] = v
        return out

    # the fields other layers read, None when absent: op_name, op_type, source_file (str);
    # source_line, stack_frame_id (int)
    op_name = property(lambda self: self.fields.get("op_name"))
    op_type = property(lambda self: self.fields.get("op_type"))
    source_file = property(lambda self: self.fields.get("source_file"))
    source_line = property(lambda self: self.fields.get("source_line"))
    stack_frame_id = property(lambda self: self.fields.get("stack_frame_id"))

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class BackendConfig:
    """backend_config: a quoted string or raw JSON, kept verbatim; `.json` decodes it."""
    text: str            # as written after '='

    @property
    def is_raw_json(self) -> bool:
        return self.text.startswith("{")

    @cached_property
    def string(self) -> str:
        return unquote(self.text) if self.text.startswith('"') else self.text

    @property
    def json(self) -> Any:
        s = self.string
        if not s:
            return None
        try:
            return json.loads(s)
        except ValueError:
            return None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class AliasEntry:
    output_index: tuple[int, ...]
    operand_index: int
    operand_shape_index: tuple[int, ...]


@dataclass(frozen=True)
class OutputOperandAliasing:
    entries: tuple[AliasEntry, ...]

    def __str__(self) -> str:
        return "{" + ", ".join(
            f"{_shape_index(e.output_index)}: ({e.operand_index}, {_shape_index(e.operand_shape_index)})"
            for e in self.entries) + "}"


@dataclass(frozen=True)
class InputOutputAlias:
    """Module header input_output_alias: {output_index: (param, param_index, kind)}."""
    entries: tuple[tuple[tuple[int, ...], int, tuple[int, ...], str | None], ...]

    def __str__(self) -> str:
        parts = []
        for out, p, pidx, kind in self.entries:
            s = f"{_shape_index(out)}: ({p}, {_shape_index(pidx)}"
            if kind:
                s += f", {kind}"
            parts.append(s + ")")
        return "{ " + ", ".join(parts) + " }" if parts else "{}"


@dataclass(frozen=True)
class BufferDonors:
    entries: tuple[tuple[int, tuple[int, ...]], ...]

    def __str__(self) -> str:
        if not self.entries:
            return "{}"
        return "{ " + ", ".join(f"({p}, {_shape_index(i)})" for p, i in self.entries) + " }"


def _shape_index(idx) -> str:
    return "{" + ",".join(map(str, idx)) + "}"


@dataclass(frozen=True)
class ComputationLayout:
    """entry_computation_layout={(p0, p1)->result}"""
    parameters: tuple[Shape, ...]
    result: Shape

    def __str__(self) -> str:
        return "{(" + ", ".join(map(str, self.parameters)) + ")->" + str(self.result) + "}"


@dataclass(frozen=True)
class RawValue:
    """An attribute value kept as (canonicalized) source text."""
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Enum:
    """A bare identifier attribute (direction=LT, kind=kLoop, ...)."""
    value: str

    def __str__(self) -> str:
        return self.value

    def __eq__(self, other):
        if isinstance(other, str):
            return self.value == other
        return isinstance(other, Enum) and self.value == other.value

    def __hash__(self):
        return hash(self.value)


@dataclass(frozen=True)
class ComputationRef:
    name: str             # without '%'

    def __str__(self) -> str:
        return "%" + self.name


@dataclass(frozen=True)
class InlineComputation:
    """A called computation written inline: to_apply={ ... }; the parser lifts it into the module."""
    name: str

    def __str__(self) -> str:
        return "%" + self.name


# ----------------------------------------------------------------------------- decoders

def _word(v, what="a word") -> str:
    if isinstance(v, (Word, Quoted)) and not isinstance(v, Quoted):
        return str(v)
    if isinstance(v, str) and not isinstance(v, Quoted):
        return str(v)
    raise AttrError(f"expected {what}, got '{generic_text(v)}'")


def _int(v) -> int:
    try:
        return int(_word(v, "an integer"))
    except ValueError:
        raise AttrError(f"expected an integer, got '{generic_text(v)}'") from None


def _int_tuple(v, what="a list of integers like {1,2}") -> tuple[int, ...]:
    if isinstance(v, IntList):
        return tuple(v)
    if isinstance(v, Group) and v.open == "{":
        items = v.items
        # integers separated by single commas, as XLA's ParseInt64List reads them
        if all((isinstance(x, Sep) and x == ",") == (k % 2 == 1) for k, x in enumerate(items)) and \
                len(items) % 2 == 1:
            try:
                return tuple(int(_word(x)) for x in items[::2])
            except (ValueError, AttrError):
                pass
    raise AttrError(f"expected {what}, got '{generic_text(v)}'")


def dec_int(v, ctx=None):
    return _int(v)


def dec_float(v, ctx=None):
    try:
        return float(_word(v, "a number"))
    except ValueError:
        raise AttrError(f"expected a number, got '{generic_text(v)}'") from None


def dec_bool(v, ctx=None):
    w = _word(v, "true or false")
    if w in ("true", "false"):
        return w == "true"
    raise AttrError(f"expected true or false, got '{w}'")


def dec_string(v, ctx=None):
    if isinstance(v, Quoted):
        return str(v)
    raise AttrError(f'expected a quoted string, got \'{generic_text(v)}\'')


def dec_name(v, ctx=None):
    return Enum(_word(v, "a name"))


def make_enum(allowed: tuple[str, ...]):
    lowered = {a.lower(): a for a in allowed}

    def dec(v, ctx=None):
        w = _word(v, "one of " + ", ".join(allowed))
        if w in allowed:
            return Enum(w)
        if w.lower() in lowered:
            return Enum(lowered[w.lower()])
        raise AttrError(f"expected one of {', '.join(allowed)}, got '{w}'")
    return dec


def dec_dims(v, ctx=None):
    return _int_tuple(v)


def _empty_braces(v, like: str) -> bool:
    """True for `{}` (it lexes as an empty IntList), False for another `{...}` group; for anything else
    an error saying `like` was expected."""
    if isinstance(v, IntList) and not v:
        return True
    if not (isinstance(v, Group) and v.open == "{"):
        raise AttrError(f"expected {like}, got '{generic_text(v)}'")
    return False


def _braced(v, item):
    """The items of a `{a, b, ...}` list, each read by `item` (`{}` lexes as an empty IntList); None when v
    is no such list."""
    if isinstance(v, Group) and v.open == "{":
        return tuple(item(x) for x in v.values())
    if isinstance(v, IntList) and not v:
        return ()
    return None


def _comp_name(v) -> str:
    if isinstance(v, InlineComputation):
        return v.name
    w = _word(v, "a computation name")
    return w[1:] if w.startswith("%") else w


def dec_computation(v, ctx=None):
    if isinstance(v, InlineComputation):
        return ComputationRef(v.name)
    return ComputationRef(_comp_name(v))


def _xs(text: str) -> list[str]:
    return text.split("x")


def dec_window(v, ctx=None):
    if _empty_braces(v, "a window like {size=3x3 stride=2x2}"):
        return Window(())
    fields: dict[str, list[str]] = {}
    known = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"}
    items = v.values()
    where: dict[str, KV] = {}
    for it in items:
        if not isinstance(it, KV):
            raise AttrError(f"expected a window field like size=3x3, got '{generic_text(it)}'", at=it,
                            nth=nth_among(items, it))
        if it.key not in known:
            raise AttrError(f"unexpected window field '{it.key}' (expected one of {', '.join(sorted(known))})",
                            at=it, nth=nth_among(items, it))
        if it.key in fields:
            raise AttrError(f"window field '{it.key}' is given twice", at=it, nth=nth_among(items, it))
        fields[it.key] = _xs(_word(it.value, f"a value for window {it.key}"))
        where[it.key] = it
    if "size" not in fields:
        raise AttrError("window must have a size=")
    n = len(fields["size"])
    for k, vals in fields.items():
        if len(vals) != n:
            raise AttrError(f"window {k} has {len(vals)} dimensions but size has {n}", at=where[k],
                            nth=nth_among(items, where[k]))
    try:
        dims = []
        for i in range(n):
            lo = hi = 0
            if "pad" in fields:
                p = fields["pad"][i].split("_")
                if len(p) != 2:
                    raise ValueError
                lo, hi = int(p[0]), int(p[1])
            dims.append(WindowDim(
                size=int(fields["size"][i]),
                stride=int(fields["stride"][i]) if "stride" in fields else 1,
                padding_low=lo, padding_high=hi,
                window_dilation=int(fields["rhs_dilate"][i]) if "rhs_dilate" in fields else 1,
                base_dilation=int(fields["lhs_dilate"][i]) if "lhs_dilate" in fields else 1,
                window_reversal=(fields["rhs_reversal"][i] == "1") if "rhs_reversal" in fields else False))
    except ValueError:
        raise AttrError(f"malformed window '{generic_text(v)}'") from None
    return Window(tuple(dims))


_LABEL_RE = re.compile(r"^(\w+)_(\w+)->(\w+)$")


def _split_labels(s: str) -> list[str]:
    out, i = [], 0
    while i < len(s):
        if s[i] == "[":
            j = s.index("]", i)
            out.append(s[i + 1:j])
            i = j + 1
        else:
            out.append(s[i])
            i += 1
    return out


def dec_conv_dnums(v, ctx=None):
    """XLA's ParseConvolutionDimensionNumbers: `?` marks a dimension none of b/f/i/o/spatial names
    (custom calls); a label left out is dimension 0, as in XLA's proto; the three parts may differ
    in length but must have the same number of spatial dimensions."""
    w = _word(v, "dim_labels like b01f_01io->b01f")
    m = re.match(r"^([\w\[\]?]+)_([\w\[\]?]+)->([\w\[\]?]+)$", w)
    if not m:
        raise AttrError(f"expected dim_labels like b01f_01io->b01f, got '{w}'")
    lhs, rhs, out = (_split_labels(g) for g in m.groups())

    def pick(labels, a, b, part):
        named = [c for c in labels if c != "?"]
        if len(set(named)) != len(named):
            raise AttrError(f"dim_labels '{w}': expects unique {part} dimension numbers, but sees "
                            f"'{''.join(labels)}'")
        spatial = {}
        for i, c in enumerate(labels):
            if c not in (a, b, "?"):
                if not c.isdigit() or int(c) >= len(labels):
                    raise AttrError(f"dim_labels '{w}': expects [0-{len(labels) - 1}{a}{b}?] in {part} "
                                    f"dimension numbers, got '{c}'")
                spatial[int(c)] = i
        if sorted(spatial) != list(range(len(spatial))):
            raise AttrError(f"dim_labels '{w}': {part} spatial dimensions must be numbered "
                            f"0..{len(spatial) - 1}")
        where = {c: i for i, c in enumerate(labels)}
        return where.get(a, 0), where.get(b, 0), tuple(spatial[k] for k in range(len(spatial)))
    ib, if_, isp = pick(lhs, "b", "f", "input")
    ki, ko, ksp = pick(rhs, "i", "o", "kernel")
    ob, of, osp = pick(out, "b", "f", "output")
    if not (len(isp) == len(ksp) == len(osp)):
        raise AttrError(f"dim_labels '{w}': input, kernel and output must have the same number of spatial "
                        f"dimensions, got {len(isp)}, {len(ksp)} and {len(osp)}")
    return ConvDimensionNumbers(ib, if_, isp, ki, ko, ksp, ob, of, osp)


def dec_slice(v, ctx=None):
    if _empty_braces(v, "a slice like {[0:2], [1:5:2]}"):
        return SliceSpec(())
    dims = []
    items = v.values()
    for it in items:
        if not (isinstance(it, Group) and it.open == "["):
            raise AttrError(f"expects [start:limit:step] or [start:limit] in slice, got '{generic_text(it)}'",
                            at=it, nth=nth_among(items, it))
        text = "".join(generic_text(x) for x in it.items)
        parts = text.split(":")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise AttrError(f"expects [start:limit:step] or [start:limit] with integers, got '[{text}]'",
                            at=it, nth=nth_among(items, it)) from None
        if len(nums) == 2:
            dims.append(SliceDim(nums[0], nums[1]))
        elif len(nums) == 3:
            dims.append(SliceDim(*nums))
        else:
            raise AttrError(f"expects [start:limit:step] or [start:limit], but sees {len(nums)} numbers in "
                            f"'[{text}]'", at=it, nth=nth_among(items, it))
    return SliceSpec(tuple(dims))


def dec_padding(v, ctx=None):
    w = _word(v, "padding like 0_0x1_2_1")
    dims = []
    for part in w.split("x"):
        nums = part.split("_")
        try:
            vals = [int(n) for n in nums]
        except ValueError:
            raise AttrError(f"malformed padding '{w}'") from None
        if len(vals) == 2:
            dims.append(PaddingDim(vals[0], vals[1]))
        elif len(vals) == 3:
            dims.append(PaddingDim(*vals))
        else:
            raise AttrError(f"malformed padding '{w}': each dimension is low_high or low_high_interior")
    return PaddingConfig(tuple(dims))


def _bracket_ints(g) -> tuple[int, ...]:
    if isinstance(g, Group) and g.open in "[(":
        try:
            return tuple(int(_word(x)) for x in g.values())
        except (ValueError, AttrError):
            pass
    raise AttrError(f"expected a list of integers, got '{generic_text(g)}'")


# The most devices an iota list (replica groups, a tile assignment, a mesh) may name: its sizes are
# checked against this before anything is expanded, so that `[1000000000,2]<=[2000000000]` (a few
# bytes of text) is an error, not gigabytes of device ids.  No machine XLA runs on has this many.
MAX_DEVICES = 1 << 20


def check_device_count(sizes, what: str, at=None) -> int:
    """The product of `sizes` (the devices an iota list or a mesh names); AttrError when a size is
    negative or the product is above MAX_DEVICES."""
    n = 1
    for d in sizes:
        if d < 0:
            raise AttrError(f"{what}: sizes must not be negative, got {d}", at=at)
        n *= d
    if n > MAX_DEVICES:
        raise AttrError(f"{what} name{'s' if not what.endswith('s') else ''} {n:,} devices, more than hlo "
                        f"handles ({MAX_DEVICES:,})", at=at)
    return n


def _iota(items, what) -> tuple[tuple[int, ...], IotaReplicaGroups]:
    # [dims]<=[reshape]T(perm)
    items = list(items)
    if len(items) < 3 or not (isinstance(items[1], Sep) and items[1] == "<="):
        raise AttrError(f"malformed iota {what}")
    dims = _bracket_ints(items[0])
    reshape = _bracket_ints(items[2])
    label = "iota " + what.split(" (")[0]
    check_device_count(dims, f"{label} [{','.join(map(str, dims))}]", at=items[0])
    check_device_count(reshape, f"{label} <=[{','.join(map(str, reshape))}]", at=items[2])
    perm: tuple[int, ...] = ()
    rest = items[3:]
    if rest:
        if len(rest) == 2 and rest[0] == "T":
            perm = _bracket_ints(rest[1])
        else:
            raise AttrError(f"malformed iota {what}")
    return dims, IotaReplicaGroups(tuple(dims[:2]) if len(dims) >= 2 else tuple(dims), reshape, perm)


def _unquote_axis(w) -> str | None:
    w = str(w)
    return w[1:-1] if len(w) >= 2 and w[0] == w[-1] == "'" else None


def _mesh_iota_device_ids(at, n) -> tuple[int, ...]:
    """A mesh's device_ids in the iota form `[r1,r2,...]T(p1,p2,...)` (T optional for one dim)."""
    vals = [i for i in at.items if not (isinstance(i, Sep) and i == ",")]   # 'T' is kept
    reshape = _bracket_ints(vals[0])
    perm: tuple[int, ...] = (0,) if len(reshape) == 1 else ()
    if len(vals) == 3 and vals[1] == "T":
        perm = _bracket_ints(vals[2])
    elif len(vals) != 1 or not perm:
        raise AttrError(f"malformed iota device_ids '{generic_text(at)}' (expected [dims]T(perm))", at=at)
    size = 1
    for r in reshape:
        size *= r
    if sorted(perm) != list(range(len(reshape))) or size != n or min(reshape) <= 0:
        raise AttrError(f"iota device_ids '{generic_text(at)}' must reshape the mesh's {n} devices and "
                        f"permute all their dimensions", at=at)
    import numpy as np
    return tuple(int(d) for d in np.arange(n).reshape(reshape).transpose(perm).ravel())


def _dec_mesh_replica_groups(items) -> MeshReplicaGroups:
    """mesh['x'=2,'y'=4] {'y'} / mesh[...], device_ids=(...) {...}, with the checks XLA's parser and
    MeshAxesReplicaGroupList make (where XLA stops with a crash, hlo reports an error)."""
    if str(items[0]) == "maximal_mesh":
        raise AttrError("MeshAxesReplicaGroupList must have more than one device per group, but a "
                        "maximal_mesh has one device", at=items[0])
    if len(items) < 3 or not (isinstance(items[1], Group) and items[1].open == "["):
        raise AttrError("expected '[' after mesh: mesh['axis'=size,...] {'axis',...}", at=items[0])
    names: list[str] = []
    sizes: list[int] = []
    for it in items[1].values():
        name = _unquote_axis(it.key) if isinstance(it, KV) else None
        if name is None:
            raise AttrError(f"expects a mesh axis like 'x'=2, got '{generic_text(it)}'", at=it)
        try:
            size = int(str(it.value))
        except ValueError:
            raise AttrError(f"expects an integer size for mesh axis '{name}', got '{generic_text(it.value)}'",
                            at=it.value) from None
        if size <= 0:
            raise AttrError(f"mesh axis '{name}' must have a positive size, got {size}", at=it.value)
        if name in names:
            raise AttrError(f"mesh has duplicate axis names: '{name}'", at=it.key)
        names.append(name)
        sizes.append(size)
        check_device_count(sizes, "the mesh's axes", at=it.value)
    rest = list(items[2:])
    device_ids = None
    if rest and isinstance(rest[0], KV) and rest[0].key == "device_ids":
        g = rest.pop(0).value
        if not (isinstance(g, Group) and g.open == "("):
            raise AttrError(f"expected '(' for device_ids, got '{generic_text(g)}'", at=g)
        n = 1
        for z in sizes:
            n *= z
        vals = g.values()
        iota = bool(vals) and isinstance(vals[0], Group) and vals[0].open == "["
        if iota:           # ([reshape]T(perm)): iota(n) reshaped, transposed, flattened (XLA's parser)
            device_ids = _mesh_iota_device_ids(g, n)
        else:
            try:
                device_ids = tuple(int(str(x)) for x in vals)
            except ValueError:
                raise AttrError("device_ids of a mesh replica group list are integers or the iota form "
                                f"[dims]T(perm), got '{generic_text(g)}'", at=g) from None
        if len(device_ids) != n or sorted(device_ids) != list(range(n)):
            raise AttrError(f"device_ids must be a permutation of 0..{n - 1} (the mesh has {n} devices), got "
                            f"({','.join(map(str, device_ids))})", at=g)
        if device_ids == tuple(range(n)) and not iota:
            raise AttrError("device_ids (0,1,2,3...) is the default order: leave it out", at=g)
    if len(rest) != 1 or not isinstance(rest[0], (Group, IntList)) or (
            isinstance(rest[0], Group) and rest[0].open != "{"):
        raise AttrError("expected the grouped mesh axes in braces after the mesh, like {'x'}", at=rest[0] if rest else None)
    refs = [i for i in rest[0].items if not (isinstance(i, Sep) and i == ",")] if isinstance(rest[0], Group) else []
    axes: list[MeshAxis] = []
    k = 0
    while k < len(refs):
        it = refs[k]
        name = _unquote_axis(it) if isinstance(it, str) else None
        nth = (name in names) + sum(1 for r in refs[:k] if r == it)   # the mesh's list spells it first
        if name is None:
            raise AttrError(f"expects a quoted mesh axis name like 'x', got '{generic_text(it)}'", at=it, nth=nth)
        if name in names:
            index = names.index(name)
        elif name.isdigit() and int(name) < len(names):
            index = int(name)
        else:
            raise AttrError(f"'{name}' is not an axis of the mesh (its axes: "
                            f"{', '.join(repr(n) for n in names)})", at=it, nth=nth)
        axis = MeshAxis(index)
        if k + 1 < len(refs) and refs[k + 1] == ":":
            pre_g = refs[k + 2] if k + 2 < len(refs) else None
            size_w = refs[k + 3] if k + 3 < len(refs) else None
            try:
                pre = int(str(pre_g.values()[0])) if isinstance(pre_g, Group) and pre_g.open == "(" and \
                    len(pre_g.values()) == 1 else None
                size = int(str(size_w))
            except (ValueError, TypeError):
                pre = size = None
            if pre is None or size is None:
                raise AttrError(f"expects a sub-axis like '{name}':(pre_size)size", at=it, nth=nth)
            full = sizes[index]
            if pre <= 0 or size <= 0 or full % (pre * size):
                raise AttrError(f"sub-axis '{name}':({pre}){size}: pre_size x size must divide the axis size "
                                f"{full}", at=it, nth=nth)
            if size >= full:
                raise AttrError(f"sub-axis '{name}':({pre}){size}: the size must be less than the axis size "
                                f"{full} (name the whole axis instead)", at=it, nth=nth)
            axis = MeshAxis(index, pre, size)
            k += 3
        for other in axes:
            if other.index != axis.index:
                continue
            if other.pre_size is None or axis.pre_size is None or (
                    axis.pre_size < other.pre_size * other.size and other.pre_size < axis.pre_size * axis.size):
                raise AttrError(f"mesh axes overlap: '{name}' is named twice in the groups", at=it, nth=nth)
            lo, hi = sorted((other.pre_size, axis.pre_size))
            if hi % min(other.pre_size * other.size, axis.pre_size * axis.size):
                raise AttrError(f"sub-axes of '{name}' cannot coexist", at=it, nth=nth)
        if axes and axes[-1].index == axis.index and axes[-1].pre_size is not None and \
                axis.pre_size == axes[-1].pre_size * axes[-1].size:
            raise AttrError(f"adjacent sub-axes of '{name}' can be merged: write them as one", at=it, nth=nth)
        axes.append(axis)
        k += 1
    per_group = 1
    for a in axes:
        per_group *= a.size if a.size is not None else sizes[a.index]
    if per_group <= 1:
        raise AttrError(f"MeshAxesReplicaGroupList must have more than one device per group, but got {per_group}",
                        at=rest[0])
    return MeshReplicaGroups(tuple(names), tuple(sizes), tuple(axes), device_ids)


def dec_replica_groups(v, ctx=None):
    if isinstance(v, Seq) and v.items and str(v.items[0]) in ("mesh", "maximal_mesh"):
        return _dec_mesh_replica_groups(v.items)
    if isinstance(v, Seq):
        dims, iota = _iota(v.items, "replica groups (expected [groups,size]<=[dims]T(perm))")
        if len(dims) != 2:
            raise AttrError("iota replica groups need two dimensions: [groups,size]")
        n = 1
        for d in iota.reshape_dims:
            n *= d
        if dims[0] * dims[1] != n:
            raise AttrError(f"iota replica groups [{dims[0]},{dims[1]}] do not match {n} devices")
        if iota.transpose_perm and sorted(iota.transpose_perm) != list(range(len(iota.reshape_dims))):
            raise AttrError("iota replica groups: T(...) must be a permutation of the reshape dimensions")
        return iota
    if isinstance(v, IntList) and not v:
        return ReplicaGroups(())
    if isinstance(v, IntList):
        raise AttrError(f"expects a list of integer lists like {{{{0,1}},{{2,3}}}}, got the single list "
                        f"'{generic_text(v)}' (write {{{generic_text(v)}}})", at=str(v[0]))
    if isinstance(v, Group) and v.open == "{":
        items = v.values()
        groups = []
        for g in items:
            try:
                groups.append(_int_tuple(g))
            except AttrError:
                raise AttrError(f"expects a list of integer lists like {{{{0,1}},{{2,3}}}}, got "
                                f"'{generic_text(g)}' in it", at=g, nth=nth_among(items, g)) from None
        return ReplicaGroups(tuple(groups))
    raise AttrError(f"expected replica groups like {{{{0,1}},{{2,3}}}} or [2,2]<=[4], got '{generic_text(v)}'")


def dec_source_target_pairs(v, ctx=None):
    if isinstance(v, IntList) and not v:
        return ()
    if isinstance(v, Group) and v.open == "{":
        pairs = []
        for g in v.values():
            t = _int_tuple(g)
            if len(t) != 2:
                raise AttrError(f"source_target_pairs entries are {{source,target}}, got '{generic_text(g)}'")
            pairs.append(t)
        return tuple(pairs)
    raise AttrError(f"expected source_target_pairs like {{{{0,1}},{{1,0}}}}, got '{generic_text(v)}'")


_SHARDING_KINDS = ("replicated", "manual", "unknown", "maximal", "unreduced")
_SHARDING_EXPECTED = ("replicated, maximal device=N, manual, unknown, unreduced, devices=[...], "
                      "last_tile_dim_replicate, last_tile_dims={...}, shard_as N, shard_like N or metadata=")


def _sharding_one(g) -> Sharding:
    """One HloSharding, with XLA's checks (ParseSingleSharding) for the classic forms; named
    (mesh) shardings, `{mesh[...] ...}` / `{maximal_mesh[...]}`, are read leniently."""
    if isinstance(g, IntList) and not g:
        return Sharding("tuple")
    if isinstance(g, IntList):
        raise AttrError(f"expected a sharding like {{replicated}}, got '{generic_text(g)}'", at=str(g[0]))
    if not (isinstance(g, Group) and g.open == "{"):
        raise AttrError(f"expected a sharding like {{replicated}}, got '{generic_text(g)}'")
    items = list(g.items)
    # a tuple sharding: every item is a group
    vals = [i for i in items if not isinstance(i, Sep)]
    if vals and all(isinstance(i, (Group, IntList)) for i in vals):
        elements = []
        for e in vals:
            try:
                elements.append(_sharding_one(e))
            except AttrError as err:
                if err.at is None:
                    err.at, err.nth = e, nth_among(items, e)
                else:
                    err.nth += nth_among(items, e, needle_of(err.at))
                raise
        return Sharding("tuple", elements=tuple(elements))
    named = bool(vals) and isinstance(vals[0], Word) and str(vals[0]) in ("mesh", "maximal_mesh")
    first = vals[0] if vals else None

    def bad(message, it):
        raise AttrError(message, at=it, nth=nth_among(items, it) if it is not None else 0)

    kind = None
    device = None
    tile = None
    ltdr = False
    ltd: tuple[str, ...] = ()
    group = None
    metadata = []
    extra = []
    i = 0
    while i < len(items):
        it = items[i]
        if isinstance(it, Sep):
            if not named:
                bad(f"unexpected '{it}' in sharding (the parts of a sharding are separated by spaces; "
                    f"expected {_SHARDING_EXPECTED})", it)
            i += 1
            continue
        if isinstance(it, KV):
            if it.key == "device":
                try:
                    device = _int(it.value)
                except AttrError:
                    bad(f"device= must be an integer, got '{generic_text(it.value)}'", it)
            elif it.key == "devices":
                dims = _bracket_ints(it.value)
                i += 1
                if i + 1 < len(items) and isinstance(items[i], Sep) and items[i] == "<=":
                    reshape = _bracket_ints(items[i + 1])
                    check_device_count(dims, f"a sharding's tile assignment [{','.join(map(str, dims))}]", it)
                    check_device_count(reshape, f"a sharding's iota <=[{','.join(map(str, reshape))}]",
                                       items[i + 1])
                    i += 2
                    perm: tuple[int, ...] = ()
                    if i + 1 < len(items) and items[i] == "T" and isinstance(items[i + 1], Group):
                        perm = _bracket_ints(items[i + 1])
                        i += 2
                    tile = TileAssignment(dims, iota=IotaReplicaGroups(dims, reshape, perm))
                else:
                    devs = []
                    while i < len(items):
                        x = items[i]
                        if isinstance(x, Sep) and x == ",":
                            i += 1
                            continue
                        if isinstance(x, Word) and re.fullmatch(r"\d+", x):
                            devs.append(int(x))
                            i += 1
                            continue
                        break
                    tile = TileAssignment(dims, devices=tuple(devs))
                if kind is None or named:
                    kind = "tiled"
                continue
            elif it.key == "last_tile_dims":
                if isinstance(it.value, Group):
                    ltd = tuple(str(x) for x in it.value.values())
                else:
                    ltd = ()
            elif it.key == "metadata":
                metadata.append(generic_text(it.value))
            elif named:
                extra.append(generic_text(it))
            else:
                bad(f"unknown attribute '{it.key}' in sharding: expected device=, devices=, metadata= or "
                    f"last_tile_dims=", it)
            i += 1
            continue
        w = str(it) if isinstance(it, Word) else generic_text(it)
        if w in _SHARDING_KINDS and kind is None:
            kind = w
        elif w in _SHARDING_KINDS and not named:
            bad(f"'{w}' conflicts with '{kind if kind != 'tiled' else 'devices='}' in the same sharding", it)
        elif w == "last_tile_dim_replicate":
            ltdr = True
        elif w in ("shard_as", "shard_like") and i + 1 < len(items):
            if not named and not (isinstance(items[i + 1], Word) and re.fullmatch(r"-?\d+", items[i + 1])):
                bad(f"expects an integer after {w}, got '{generic_text(items[i + 1])}'", items[i + 1])
            group = f"{w} {items[i + 1]}"
            i += 1
        elif named:
            extra.append(w)
        else:
            bad(f"unexpected '{w}' in sharding (expected {_SHARDING_EXPECTED})", it)
        i += 1
    if named and kind is None:
        # named mesh shardings without a kind word are kept as written
        return Sharding("raw", extra=(g.text or generic_text(g),))
    if kind is None:
        bad("a sharding needs a kind: replicated, maximal device=N, manual, unknown, unreduced or "
            "devices=[...] (non-maximal shardings must have a tile assignment)", first)
    if not named:
        if kind == "maximal" and (device is None or tile is not None):
            bad("maximal shardings should have exactly one device assigned: write {maximal device=N}", first)
        if kind in ("replicated", "manual", "unknown", "unreduced") and (device is not None or tile is not None):
            bad(f"{kind} shardings should not have any devices assigned", first)
        if kind == "tiled" and device is not None:
            bad("device= is only for maximal shardings; a tiled sharding lists its devices in devices=[...]",
                first)
        if tile is not None and tile.devices is not None and len(tile.devices) <= 1:
            bad("non-maximal shardings must have more than one device assigned", first)
    if kind == "maximal" and device is None:
        raise AttrError("a maximal sharding needs device=N", at=first)
    if tile is not None:
        n = 1
        for d in tile.dims:
            n *= d
        count = len(tile.devices) if tile.devices is not None else n
        if tile.iota is not None:
            m = 1
            for d in tile.iota.reshape_dims:
                m *= d
            count = m
        if count != n:
            bad(f"sharding tile assignment {list(tile.dims)} needs {n} devices, got {count}", first)
    return Sharding(kind, device, tile, ltdr, ltd, (), group, tuple(metadata), tuple(extra))


def dec_sharding(v, ctx=None):
    return _sharding_one(v)


def dec_metadata(v, ctx=None):
    if isinstance(v, Metadata):
        return v
    if isinstance(v, IntList) and not v:
        return Metadata("{}")
    if isinstance(v, Group) and v.open == "{":
        return Metadata(v.text or generic_text(v))
    raise AttrError(f"expected metadata={{...}}, got '{generic_text(v)}'")


def dec_backend_config(v, ctx=None):
    if isinstance(v, BackendConfig):
        return v
    if isinstance(v, Quoted):
        return BackendConfig(v.raw)
    if isinstance(v, (Group, IntList)):
        return BackendConfig(getattr(v, "text", "") or generic_text(v))
    raise AttrError(f"expected a quoted string or {{json}}, got '{generic_text(v)}'")


def dec_frontend_attributes(v, ctx=None):
    if _empty_braces(v, 'frontend attributes like {key="value"}'):
        return FrontendAttributes(())
    out = []
    for it in v.values():
        if not isinstance(it, KV):
            raise AttrError(f"expected key=value in frontend attributes, got '{generic_text(it)}'")
        val = it.value
        if isinstance(val, Quoted):
            text = str(val)
        elif isinstance(val, Group) and val.text:
            text = val.text          # a raw {...} dict keeps its source spelling
        else:
            text = generic_text(val)
        out.append((it.key, text))
    return FrontendAttributes(tuple(out))


@dataclass(frozen=True)
class FrontendAttributes:
    items: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        return "{" + ",".join(f"{k}={quote(v)}" for k, v in sorted(self.items)) + "}"

    def __getitem__(self, key):
        return dict(self.items)[key]


def dec_precision_list(v, ctx=None):
    if isinstance(v, IntList) and not v:
        return ()
    if isinstance(v, Group) and v.open == "{":
        return tuple(Enum(_word(x, "a precision").lower()) for x in v.values())
    raise AttrError(f"expected a precision list like {{default,highest}}, got '{generic_text(v)}'")


def dec_shape(v, ctx=None):
    if isinstance(v, Shape):
        return v
    if isinstance(v, Group) and v.open == "(":
        return _tuple_shape(v)
    raise AttrError(f"expected a shape, got '{generic_text(v)}'")


def _shape_seq(values) -> list[Shape]:
    """Shapes from a sequence of generic values: arrays, (tuples), and b(buffers) (a word `b`
    followed by a parenthesized shape)."""
    shapes = []
    values = list(values)
    k = 0
    while k < len(values):
        x = values[k]
        if isinstance(x, Shape):
            shapes.append(x)
        elif isinstance(x, Group) and x.open == "(":
            shapes.append(_tuple_shape(x))
        elif isinstance(x, str) and not isinstance(x, (Quoted, Sep)) and x == "b" and k + 1 < len(values) \
                and isinstance(values[k + 1], Group) and values[k + 1].open == "(":
            inner = _shape_seq(values[k + 1].values())
            if len(inner) != 1:
                raise AttrError(f"expected one shape in b(...), got '{generic_text(values[k + 1])}'")
            shapes.append(Shape("buffer", tuple_shapes=(inner[0],)))
            k += 1
        else:
            raise AttrError(f"expected a shape, got '{generic_text(x)}'")
        k += 1
    return shapes


def _tuple_shape(g: Group) -> Shape:
    return Shape.tuple_of(_shape_seq(g.values()))


@dataclass(frozen=True)
class ShapeList:
    shapes: tuple[Shape, ...]

    def __str__(self) -> str:
        return "{" + ", ".join(map(str, self.shapes)) + "}"


def dec_shape_list(v, ctx=None):
    if isinstance(v, IntList) and not v:
        return ShapeList(())
    if isinstance(v, Group) and v.open == "{":
        return ShapeList(tuple(dec_shape(x) for x in v.values()))
    raise AttrError(f"expected a list of shapes, got '{generic_text(v)}'")


def _split_colon_entries(g: Group):
    """{ {0}: (1, {}), {1}: (0, {0}) } -> [({0}, Group(...)), ...]"""
    items = [i for i in g.items if not (isinstance(i, Sep) and i == ",")]
    out = []
    i = 0
    while i < len(items):
        idx = items[i]
        if i + 2 >= len(items) + 0 and not (i + 2 < len(items)):
            raise AttrError(f"malformed aliasing entry in '{generic_text(g)}'")
        colon = items[i + 1]
        target = items[i + 2]
        if str(colon) != ":":
            raise AttrError(f"expected ':' in '{generic_text(g)}'")
        out.append((_int_tuple(idx), target))
        i += 3
    return out


def _alias_entries(v, like: str, target: str, counts: tuple[int, ...]):
    """(output index, target group, its values) of each `{out}: (...)` entry of the aliasing attribute
    v, written `like`; each target is a `target` group of one of `counts` values."""
    if not (isinstance(v, Group) and v.open == "{"):
        raise AttrError(f"expected {like}, got '{generic_text(v)}'")
    for out, tgt in _split_colon_entries(v):
        vals = tgt.values() if isinstance(tgt, Group) and tgt.open == "(" else None
        if vals is None or len(vals) not in counts:
            raise AttrError(f"expected {target}, got '{generic_text(tgt)}'")
        yield out, tgt, vals


def dec_output_to_operand_aliasing(v, ctx=None):
    if isinstance(v, IntList) and not v:
        return OutputOperandAliasing(())
    entries = []
    for out, _tgt, vals in _alias_entries(v, "aliasing like {{0}: (1, {})}", "(operand, {index})", (2,)):
        entries.append(AliasEntry(out, _int(vals[0]), _int_tuple(vals[1])))
    return OutputOperandAliasing(tuple(entries))


def dec_input_output_alias(v, ctx=None):
    if isinstance(v, IntList) and not v:
        return InputOutputAlias(())
    entries = []
    for out, tgt, vals in _alias_entries(v, "input_output_alias like { {0}: (0, {}) }",
                                         "(parameter, {index}[, kind])", (2, 3)):
        kind = _word(vals[2]) if len(vals) == 3 else None
        if kind is not None and kind not in ("may-alias", "must-alias"):
            raise AttrError(f"unexpected aliasing kind '{kind}': expected may-alias or must-alias", at=vals[2],
                            nth=nth_among(list(v.items), tgt, kind) + nth_among(list(tgt.items), vals[2]))
        entries.append((out, _int(vals[0]), _int_tuple(vals[1]), kind))
    return InputOutputAlias(tuple(entries))


def dec_buffer_donor(v, ctx=None):
    if _empty_braces(v, "buffer_donor like { (0, {}) }"):
        return BufferDonors(())
    out = []
    for t in v.values():
        if not (isinstance(t, Group) and t.open == "("):
            raise AttrError(f"expected (parameter, {{index}}), got '{generic_text(t)}'")
        vals = t.values()
        if len(vals) != 2:
            raise AttrError(f"expected (parameter, {{index}}), got '{generic_text(t)}'")
        out.append((_int(vals[0]), _int_tuple(vals[1])))
    return BufferDonors(tuple(out))


def dec_computation_layout(v, ctx=None):
    if isinstance(v, Group) and v.open == "{":
        vals = list(v.items)
        if len(vals) >= 3 and isinstance(vals[0], Group) and vals[0].open == "(" and vals[1] == "->":
            params = tuple(_shape_seq(vals[0].values()))
            result = _shape_seq(vals[2:])
            if len(result) == 1:
                return ComputationLayout(params, result[0])
    raise AttrError(f"expected a computation layout like {{(f32[2]{{0}})->f32[2]{{0}}}}, got '{generic_text(v)}'")


def dec_bool_list(v, ctx=None):
    items = _braced(v, dec_bool)
    return items if items is not None else (dec_bool(v),)


def dec_raw(v, ctx=None):
    if isinstance(v, Quoted):
        return RawValue(v.raw)
    return RawValue(generic_text(v))


_ACCURACY_MODES = ("default", "highest")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf)")


def dec_result_accuracy(v, ctx=None):
    """XLA's ParseResultAccuracy: {mode=default|highest} (any case) or
    {tolerance={atol=X, rtol=X, ulps=N}} (each optional); kept as text."""
    if not (isinstance(v, Group) and v.open == "{"):
        raise AttrError(f"expected {{mode=...}} or {{tolerance={{...}}}}, got '{generic_text(v)}'")
    items = v.values()
    if not items or not isinstance(items[0], KV):
        raise AttrError(f"expects attribute name (mode or tolerance) in result_accuracy, got "
                        f"'{generic_text(items[0]) if items else '}'}'", at=items[0] if items else None)
    kv = items[0]
    if len(items) > 1:
        raise AttrError(f"expected '}}' to end result_accuracy after '{kv.key}=...', got "
                        f"'{generic_text(items[1])}'", at=items[1])
    if kv.key == "mode":
        if not isinstance(kv.value, str) or str(kv.value).lower() not in _ACCURACY_MODES:
            raise AttrError(f"expects ResultAccuracy type (default or highest) but sees: "
                            f"{generic_text(kv.value)}", at=kv.value)
    elif kv.key == "tolerance":
        tol = kv.value
        if isinstance(tol, IntList) and not tol:
            pass
        elif isinstance(tol, Group) and tol.open == "{":
            for it in tol.values():
                if not isinstance(it, KV):
                    raise AttrError(f"expects string for result_accuracy tolerance type (atol, rtol or ulps), "
                                    f"got '{generic_text(it)}'", at=it)
                if it.key not in ("atol", "rtol", "ulps"):
                    raise AttrError(f"invalid attribute name: {it.key} (a tolerance has atol, rtol and ulps)",
                                    at=Word(it.key))
                if not (isinstance(it.value, str) and _NUMBER.fullmatch(str(it.value))):
                    raise AttrError(f"expects decimal or integer for {it.key}, got '{generic_text(it.value)}'",
                                    at=it.value)
        else:
            raise AttrError(f"expected '{{' to start result accuracy list, got '{generic_text(tol)}'", at=tol)
    else:
        raise AttrError(f"invalid attribute name: {kv.key} (result_accuracy takes mode or tolerance)",
                        at=Word(kv.key))
    return dec_raw(v)


def dec_literal(v, ctx=None):
    return RawValue(generic_text(v))


def _brace_list_decoder(item, what: str):
    """A decoder of `{a, b, ...}` lists (`{}` included) whose items `item` reads; anything else is an
    error that says `what` was expected."""
    def dec(v, ctx=None):
        items = _braced(v, item)
        if items is None:
            raise AttrError(f"expected {what}, got '{generic_text(v)}'")
        return items
    return dec


dec_dims_list = _brace_list_decoder(_int_tuple, "a list of lists like {{0,1},{2}}")
dec_computations = _brace_list_decoder(lambda x: ComputationRef(_comp_name(x)), "a list of computations like {%a, %b}")
dec_instructions = _brace_list_decoder(_comp_name, "a list of instructions like {%a, %b}")


DECODERS = {
    "int": dec_int, "float": dec_float, "bool": dec_bool, "string": dec_string, "name": dec_name,
    "dims": dec_dims, "dims_list": dec_dims_list, "computation": dec_computation,
    "computations": dec_computations, "instructions": dec_instructions, "window": dec_window,
    "conv_dnums": dec_conv_dnums, "slice": dec_slice, "padding": dec_padding,
    "replica_groups": dec_replica_groups, "source_target_pairs": dec_source_target_pairs,
    "sharding": dec_sharding, "metadata": dec_metadata, "backend_config": dec_backend_config,
    "frontend_attributes": dec_frontend_attributes, "precision_list": dec_precision_list,
    "shape": dec_shape, "shape_list": dec_shape_list,
    "output_to_operand_aliasing": dec_output_to_operand_aliasing,
    "literal": dec_literal, "statistics": dec_raw, "result_accuracy": dec_result_accuracy,
    "sparsity": dec_raw, "original_value": dec_raw, "raw": dec_raw,
    "input_output_alias": dec_input_output_alias, "buffer_donor": dec_buffer_donor,
    "computation_layout": dec_computation_layout, "bool_list": dec_bool_list,
}


def decoder(kind: str):
    if kind.startswith("enum:"):
        d = _ENUM_CACHE.get(kind)
        if d is None:
            d = _ENUM_CACHE[kind] = make_enum(tuple(kind[5:].split("|")))
        return d
    return DECODERS.get(kind, dec_raw)


_ENUM_CACHE: dict[str, Any] = {}


def attr_text(value) -> str:
    """XLA's spelling of a decoded attribute value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        r = repr(value)
        return r[:-2] if r.endswith(".0") else r
    if isinstance(value, tuple):
        if value and isinstance(value[0], ComputationRef):
            return "{" + ", ".join(map(str, value)) + "}"
        if value and isinstance(value[0], Enum):
            return "{" + ",".join(map(str, value)) + "}"
        if value and isinstance(value[0], tuple):
            return "{" + ",".join("{" + ",".join(map(str, t)) + "}" for t in value) + "}"
        if value and isinstance(value[0], str):
            return "{" + ", ".join("%" + s for s in value) + "}"
        if value and isinstance(value[0], bool):
            return "{" + ",".join("true" if b else "false" for b in value) + "}"
        return "{" + ",".join(map(str, value)) + "}"
    if isinstance(value, str):
        return quote(value)
    return str(value)


# ----------------------------------------------------------------------------- comparison order

# A compare says how it orders its operands in one of two spellings: the older `type=` (FLOAT,
# TOTALORDER, SIGNED, UNSIGNED) or the newer `order=` (TOTAL, PARTIAL, WEAK), which the newest
# XLA prints instead of `type=` when the order is not the element type's default (integers and
# pred: TOTAL; floating-point and complex: PARTIAL).  XLA maps the old spelling onto the new one
# as FLOAT -> PARTIAL and TOTALORDER / SIGNED / UNSIGNED -> TOTAL.
COMPARISON_ORDERS = ("TOTAL", "PARTIAL", "WEAK")
_TYPE_ORDER = {"FLOAT": "PARTIAL", "TOTALORDER": "TOTAL", "SIGNED": "TOTAL", "UNSIGNED": "TOTAL"}
_ORDER_TYPE = {"PARTIAL": "FLOAT", "TOTAL": "TOTALORDER", "WEAK": "WEAKORDER"}


def comparison_type(attrs, element_type: str) -> str:
    """The effective comparison of a compare on `element_type` operands, in the `type=` spelling:
    FLOAT (IEEE: NaN unordered, -0 == +0), TOTALORDER (by sign and magnitude: -NaN < -inf < ... <
    -0 < +0 < ... < +inf < +NaN), WEAKORDER (the newest XLA's weak order, floats only: the total
    order with -0 == +0 and the NaNs of each sign one class), SIGNED or UNSIGNED (integers, pred).  `order=`
    decides when given, then `type=`, then the element type's default."""
    from .dtypes import ELEMENT_TYPES
    kind = ELEMENT_TYPES[element_type].kind if element_type in ELEMENT_TYPES else "float"
    if kind not in ("float", "complex"):
        return "SIGNED" if kind == "int" else "UNSIGNED"       # every order is the same order
    order = attrs.get("order")
    if order is not None:
        return "FLOAT" if kind == "complex" else _ORDER_TYPE[str(order)]
    t = attrs.get("type")
    return "FLOAT" if t is None or kind == "complex" else str(t)


def comparison_order_of_type(ctype: str) -> str:
    """TOTAL / PARTIAL for a `type=` spelling (XLA's mapping of the old attribute)."""
    return _TYPE_ORDER[ctype]


# ----------------------------------------------------------------------------- sparsity_config

_SPARSITY_SIDE = re.compile(r"(lhs|rhs)\s*=\s*\{([^{}]*)\}")


def sparsity_sides(value) -> dict[str, dict[str, int]]:
    """A convolution's `sparsity_config={lhs={sparsity=MxN dimension=D stride=S} rhs={...}}` as
    {"lhs"/"rhs": {"num_non_zero": M, "block_size": N, "dimension": D, "stride": S}} (XLA's
    SparsityConfig: M non-zero elements in every block of N along dimension D; a field left out is
    0, as in the proto).  Raises AttrError for a field it cannot read."""
    out: dict[str, dict[str, int]] = {}
    if value is None:
        return out
    for side, body in _SPARSITY_SIDE.findall(str(value)):
        fields = {"num_non_zero": 0, "block_size": 0, "dimension": 0, "stride": 0}
        for word in body.replace(",", " ").split():
            key, _, v = word.partition("=")
            try:
                if key == "sparsity":
                    m, n = v.split("x")
                    fields["num_non_zero"], fields["block_size"] = int(m), int(n)
                elif key in ("dimension", "stride"):
                    fields[key] = int(v)
            except ValueError:
                raise AttrError(f"sparsity_config: cannot read {word!r} of {side}") from None
        out[side] = fields
    return out
