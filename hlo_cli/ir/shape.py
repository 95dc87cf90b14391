"""Shapes and layouts, their HLO text form, and a memoized decoder for shape tokens.

A layout's text form is ``{minor_to_major:suffixes}`` where the suffixes, in
the order XLA prints them, are ``D(...)`` dim level types, ``T(..)(..)`` tiles,
``L(n)`` tail padding alignment, ``#(type)`` index type, ``*(type)`` pointer
type, ``E(n)`` element size in bits, ``S(n)`` memory space, ``SC(d:i,..)``
split configs, ``P(shape)`` physical shape and ``M(n)`` dynamic shape metadata
prefix bytes.  The short spelling ``f16[10,2]<1,0>`` is read as ``{1,0}``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .dtypes import ELEMENT_TYPES

COMBINE_DIM = -(2**63)      # a tile dimension printed as '*'
UNBOUNDED = -1              # a dimension printed as '?'


@dataclass(frozen=True, slots=True)
class SplitConfig:
    dimension: int
    split_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Layout:
    minor_to_major: tuple[int, ...]
    dim_level_types: tuple[str, ...] = ()      # 'D', 'C', 'S' with optional '+' / '~'
    tiles: tuple[tuple[int, ...], ...] = ()
    tail_padding_alignment: int = 1
    index_primitive_type: str | None = None
    pointer_primitive_type: str | None = None
    element_size_in_bits: int = 0
    memory_space: int = 0
    split_configs: tuple[SplitConfig, ...] = ()
    physical_shape: "Shape | None" = None
    dynamic_shape_metadata_prefix_bytes: int = 0

    @property
    def is_plain(self) -> bool:
        """Only minor_to_major, no suffix."""
        return self == Layout(self.minor_to_major)

    def __str__(self) -> str:
        parts = []
        if self.dim_level_types:
            parts.append("D(" + ",".join(self.dim_level_types) + ")")
        if self.tiles:
            parts.append("T" + "".join(
                "(" + ",".join("*" if d == COMBINE_DIM else str(d) for d in t) + ")"
                for t in self.tiles))
        if self.tail_padding_alignment != 1:
            parts.append(f"L({self.tail_padding_alignment})")
        if self.index_primitive_type:
            parts.append(f"#({self.index_primitive_type})")
        if self.pointer_primitive_type:
            parts.append(f"*({self.pointer_primitive_type})")
        if self.element_size_in_bits:
            parts.append(f"E({self.element_size_in_bits})")
        if self.memory_space:
            parts.append(f"S({self.memory_space})")
        if self.split_configs:
            parts.append("SC" + "".join(
                f"({s.dimension}:{','.join(map(str, s.split_indices))})" for s in self.split_configs))
        if self.physical_shape is not None:
            parts.append(f"P({self.physical_shape})")
        if self.dynamic_shape_metadata_prefix_bytes:
            parts.append(f"M({self.dynamic_shape_metadata_prefix_bytes})")
        m2m = ",".join(map(str, self.minor_to_major))
        return "{" + m2m + (":" + "".join(parts) if parts else "") + "}"


def default_layout(rank: int) -> Layout:
    return _DEFAULT_LAYOUTS[rank] if rank < len(_DEFAULT_LAYOUTS) else Layout(tuple(range(rank - 1, -1, -1)))


_DEFAULT_LAYOUTS = [Layout(tuple(range(r - 1, -1, -1))) for r in range(16)]


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape (element type, dims, dynamic flags, layout) or a tuple of shapes."""
    element_type: str
    dims: tuple[int, ...] = ()
    dynamic: tuple[bool, ...] = ()
    layout: Layout | None = None
    tuple_shapes: tuple["Shape", ...] | None = None

    # -- construction -------------------------------------------------------
    @staticmethod
    def array(element_type: str, dims=(), layout: Layout | None = None, dynamic=None) -> "Shape":
        dims = tuple(dims)
        dyn = tuple(dynamic) if dynamic is not None else (False,) * len(dims)
        if layout is None and element_type not in ("token", "opaque"):
            layout = default_layout(len(dims))
        return Shape(element_type, dims, dyn, layout)

    @staticmethod
    def tuple_of(shapes) -> "Shape":
        return Shape("tuple", tuple_shapes=tuple(shapes))

    # -- queries ------------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.tuple_shapes is not None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return Shape.tuple_of(s.without_layout() for s in self.tuple_shapes)
        return Shape(self.element_type, self.dims, self.dynamic, None)

    def leaves(self):
        """Array leaves, depth-first."""
        if self.is_tuple:
            for s in self.tuple_shapes:
                yield from s.leaves()
        else:
            yield self

    # -- text ---------------------------------------------------------------
    def to_str(self, layout: bool = True) -> str:
        if self.is_tuple:
            return "(" + ", ".join(s.to_str(layout) for s in self.tuple_shapes) + ")"
        dims = ",".join(
            ("?" if d == UNBOUNDED else f"<={d}") if dyn else str(d)
            for d, dyn in zip(self.dims, self.dynamic))
        text = f"{self.element_type}[{dims}]"
        lay = self.layout
        if layout and lay is not None and (self.dims or not lay.is_plain):
            text += str(lay)
        return text

    def __str__(self) -> str:
        return self.to_str(True)


# ---------------------------------------------------------------------------
# Decoding of shape tokens.  The lexer hands over a whole array shape such as
# ``f32[2,<=3]{1,0:T(2,128)}`` as one token; the same strings repeat
# thousands of times in a dump, so decoding is memoized.
# ---------------------------------------------------------------------------

class ShapeSyntaxError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


_SPACE_OR_COMMENT = re.compile(r"\s+|/\*.*?\*/", re.S)


@lru_cache(maxsize=65536)
def parse_array_shape(text: str) -> Shape:
    if " " in text or "/*" in text or "\t" in text or "\n" in text:
        return parse_array_shape(_SPACE_OR_COMMENT.sub("", text))
    m = _ARRAY_RE.match(text)
    if not m:
        raise ShapeSyntaxError(f"expected a shape, got '{text}'")
    etype, dims_text = m.group(1), m.group(2)
    if etype not in ELEMENT_TYPES:
        raise ShapeSyntaxError(f"unknown element type '{etype}'")
    dims: list[int] = []
    dyn: list[bool] = []
    if dims_text.strip():
        for part in dims_text.split(","):
            part = part.strip()
            if part == "?":
                dims.append(UNBOUNDED)
                dyn.append(True)
            elif part.startswith("<="):
                v = part[2:].strip()
                if not v.isdigit():
                    raise ShapeSyntaxError(f"bad dynamic dimension '{part}' in '{text}'", m.start(2))
                dims.append(int(v))
                dyn.append(True)
            elif part.isdigit():
                dims.append(int(part))
                dyn.append(False)
            else:
                raise ShapeSyntaxError(f"bad dimension '{part}' in '{text}'", m.start(2))
    rest = text[m.end():]
    layout = None
    if rest:
        if rest[0] == "{" and rest[-1] == "}":
            layout = _parse_layout(rest[1:-1], text, m.end() + 1)
        elif rest[0] == "<" and rest[-1] == ">":
            layout = _parse_layout(rest[1:-1], text, m.end() + 1)
        else:
            raise ShapeSyntaxError(f"unexpected '{rest}' after shape", m.end())
        if layout.minor_to_major and len(layout.minor_to_major) != len(dims):
            raise ShapeSyntaxError(
                f"layout {layout} has {len(layout.minor_to_major)} dimensions but the shape "
                f"{etype}[{dims_text}] has rank {len(dims)}", m.end())
    if etype in ("token", "opaque"):
        if dims:
            raise ShapeSyntaxError(f"{etype} shapes have no dimensions, got '{text}'")
        return Shape(etype)
    if layout is None or (not layout.minor_to_major and len(dims) > 0 and layout.is_plain):
        layout = default_layout(len(dims)) if layout is None or not layout.minor_to_major else layout
    return Shape(etype, tuple(dims), tuple(dyn), layout)


_SUFFIX_RE = re.compile(r"(SC|[DTL#*ESPM])\(")


def _parse_layout(body: str, text: str, base: int) -> Layout:
    m2m_text, _, suffix = body.partition(":")
    m2m: tuple[int, ...] = ()
    if m2m_text.strip():
        try:
            m2m = tuple(int(x) for x in m2m_text.split(","))
        except ValueError:
            raise ShapeSyntaxError(f"bad layout '{{{body}}}' in '{text}'", base) from None
    fields: dict = {}
    i = 0
    while i < len(suffix):
        m = _SUFFIX_RE.match(suffix, i)
        if not m:
            raise ShapeSyntaxError(f"bad layout suffix '{suffix[i:]}' in '{text}'", base + len(m2m_text) + 1 + i)
        key = m.group(1)
        groups = []
        j = m.end() - 1
        while j < len(suffix) and suffix[j] == "(":
            depth, k = 0, j
            while k < len(suffix):
                if suffix[k] == "(":
                    depth += 1
                elif suffix[k] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            if k >= len(suffix):
                raise ShapeSyntaxError(f"unbalanced '(' in layout of '{text}'", base)
            groups.append(suffix[j + 1:k])
            j = k + 1
            if key not in ("T", "SC"):
                break
        i = j
        try:
            if key == "D":
                fields["dim_level_types"] = tuple(x.strip() for x in groups[0].split(","))
            elif key == "T":
                fields["tiles"] = tuple(
                    tuple(COMBINE_DIM if d.strip() == "*" else int(d) for d in g.split(",") if d.strip())
                    for g in groups)
            elif key == "L":
                fields["tail_padding_alignment"] = int(groups[0])
            elif key in "#*":
                t = groups[0].strip()
                if t not in ELEMENT_TYPES:
                    raise ValueError
                fields["index_primitive_type" if key == "#" else "pointer_primitive_type"] = t
            elif key == "E":
                fields["element_size_in_bits"] = int(groups[0])
            elif key == "S":
                fields["memory_space"] = int(groups[0])
            elif key == "SC":
                scs = []
                for g in groups:
                    d, _, idx = g.partition(":")
                    scs.append(SplitConfig(int(d), tuple(int(x) for x in idx.split(",") if x.strip())))
                fields["split_configs"] = tuple(scs)
            elif key == "P":
                fields["physical_shape"] = parse_shape_text(groups[0])
            elif key == "M":
                fields["dynamic_shape_metadata_prefix_bytes"] = int(groups[0])
        except (ValueError, IndexError):
            raise ShapeSyntaxError(f"bad layout suffix '{key}(...)' in '{text}'", base) from None
    return Layout(m2m, **fields)


def parse_shape_text(text: str) -> Shape:
    """Decode a complete shape text, tuples included (not on the hot path)."""
    text = text.strip()
    if text.startswith("("):
        inner, depth, parts, start = text[1:-1], 0, [], 0
        if not text.endswith(")"):
            raise ShapeSyntaxError(f"bad tuple shape '{text}'")
        for k, ch in enumerate(inner):
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(inner[start:k])
                start = k + 1
        if inner.strip():
            parts.append(inner[start:])
        return Shape.tuple_of(parse_shape_text(p) for p in parts)
    return parse_array_shape(text)
