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
        """Array leaves, depth-first (without recursion)."""
        stack = [self]
        while stack:
            s = stack.pop()
            if s.tuple_shapes is None:
                yield s
            else:
                stack.extend(reversed(s.tuple_shapes))

    # -- text ---------------------------------------------------------------
    def to_str(self, layout: bool = True) -> str:
        if self.element_type == "buffer":
            return "b(" + self.tuple_shapes[0].to_str(layout) + ")"
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


#: The deepest nesting of tuple (and buffer) shapes hlo handles: (f32[]) is 1 deep, ((f32[])) 2.
#: XLA's parser stops at 32768 (kMaxShapeDepth); hlo's walks over shapes are recursive, so it stops
#: far earlier, with a located error, instead of running out of Python stack.
MAX_SHAPE_DEPTH = 100

#: The most dimensions a NumPy array can have (NumPy 2; NumPy 1 had 32).  XLA has no such limit.
NUMPY_MAX_RANK = 64


def shape_depth(shape: Shape) -> int:
    """How deep tuples and buffers nest in `shape` (an array: 0), without recursion; kept per tuple
    shape object (the parser shares equal shapes, and a large dump repeats its tuples many times)."""
    if shape.tuple_shapes is None:
        return 0
    hit = _DEPTHS.get(id(shape))
    if hit is not None and hit[0] is shape:
        return hit[1]
    best = _shape_depth(shape)
    if len(_DEPTHS) >= 4096:
        _DEPTHS.clear()
    _DEPTHS[id(shape)] = (shape, best)      # (the entry keeps the shape alive: its id stays its own)
    return best


_DEPTHS: dict[int, tuple[Shape, int]] = {}


def _shape_depth(shape: Shape) -> int:
    best = 0
    stack = [(shape, 0)]
    while stack:
        s, d = stack.pop()
        if s.tuple_shapes is not None:
            d += 1
            if d > best:
                best = d
            stack.extend((c, d) for c in s.tuple_shapes if c.tuple_shapes is not None)
    return best


# ---------------------------------------------------------------------------
# Decoding of shape tokens.  The lexer hands over a whole array shape such as
# ``f32[2,<=3]{1,0:T(2,128)}`` as one token; the same strings repeat
# thousands of times in a dump, so decoding is memoized.
#
# The rules are XLA's (hlo_parser.cc ParseShape / ParseLayout):
# - dimensions are integers in [0, 2^63-1], ``<=N`` (bounded dynamic) or ``?``;
# - a layout is ``{minor_to_major}`` or ``{minor_to_major:suffixes}`` with exactly one
#   minor_to_major entry per dimension; ``{}`` is *not* a layout (XLA then expects the
#   opcode there);
# - layout suffixes appear at most once each, in the order D T L # * E S SC P M;
#   ``P(...)`` is parsed by XLA but always rejected for dense arrays.
# Our one extension: ``f16[10,2]<1,0>`` is read as ``f16[10,2]{1,0}``.
# Errors carry ``offset``: the 0-based index in the text of the offending character.
# ---------------------------------------------------------------------------

_DIM_LEVEL = re.compile(r"[DCSH]\+?~?")


class ShapeSyntaxError(ValueError):
    def __init__(self, message: str, offset: int = 0):
        super().__init__(message)
        self.offset = offset


MAX_DIMENSION = 2**63 - 1
_SUFFIX_ORDER = ("D", "T", "L", "#", "*", "E", "S", "SC", "P", "M")
_SUFFIX_NAMES = {"D": "D(...) dim level types", "T": "T(...) tiles", "L": "L(...) tail padding alignment",
                 "#": "#(...) index type", "*": "*(...) pointer type", "E": "E(...) element size",
                 "S": "S(...) memory space", "SC": "SC(...) split configs", "P": "P(...) physical shape",
                 "M": "M(...) dynamic shape metadata size"}
_SIMPLE_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[((?:\d{1,18}(?:,\d{1,18})*)?)\](?:\{(\d{1,4}(?:,\d{1,4})*)\})?")
_SHAPE_TOKEN = re.compile(r"\s+|/\*.*?\*/|(-?\d+|[A-Za-z_][A-Za-z0-9_]*|<=|\*/|.)", re.S)


@lru_cache(maxsize=65536)
def parse_array_shape(text: str) -> Shape:
    """Decode one array shape such as ``f32[2,<=3]{1,0:T(2,128)}`` (no tuples).  Shapes are immutable:
    the same text gives the same object (a large dump writes a few thousand shapes many times)."""
    s = _ARRAY_SHAPES.get(text)
    if s is None:
        s = _parse_array_shape(text)
        if len(_ARRAY_SHAPES) >= _MAX_CACHED_SHAPES:
            _ARRAY_SHAPES.clear()
        _ARRAY_SHAPES[text] = s
    return s


_ARRAY_SHAPES: dict[str, Shape] = {}
_MAX_CACHED_SHAPES = 1 << 16
_PLAIN_LAYOUTS: dict[tuple[int, ...], Layout] = {tuple(lay.minor_to_major): lay for lay in _DEFAULT_LAYOUTS}


def _plain_layout(m2m: tuple[int, ...]) -> Layout:
    """The layout with only minor_to_major `m2m`: one object per permutation (the rank's default among them)."""
    lay = _PLAIN_LAYOUTS.get(m2m)
    if lay is None:
        if len(_PLAIN_LAYOUTS) >= _MAX_CACHED_SHAPES:
            _PLAIN_LAYOUTS.clear()
        lay = _PLAIN_LAYOUTS[m2m] = Layout(m2m)
    return lay


def _parse_array_shape(text: str) -> Shape:
    m = _SIMPLE_SHAPE.fullmatch(text)
    if m is not None:
        etype = m.group(1)
        if etype in ELEMENT_TYPES and etype != "token" and etype != "opaque":
            dims_text = m.group(2)
            dims = tuple(map(int, dims_text.split(","))) if dims_text else ()
            m2m_text = m.group(3)
            if m2m_text is None:
                return Shape(etype, dims, (False,) * len(dims), default_layout(len(dims)))
            m2m = tuple(map(int, m2m_text.split(",")))
            if len(m2m) == len(dims):
                return Shape(etype, dims, (False,) * len(dims), _plain_layout(m2m))
    return _ShapeReader(text).array_shape()


def parse_shape_text(text: str) -> Shape:
    """Decode a complete shape text, tuples included (not on the hot path)."""
    r = _ShapeReader(text)
    shape = r.shape()
    r.expect_end("after the shape")
    return shape


class _ShapeReader:
    """A small recursive-descent reader over the tokens of a shape's text."""

    def __init__(self, text: str):
        self.text = text
        toks = []
        for m in _SHAPE_TOKEN.finditer(text):
            if m.group(1) is not None:
                toks.append((m.group(1), m.start(1)))
        self.toks = toks
        self.i = 0

    # -- helpers
    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j][0] if j < len(self.toks) else None

    def pos(self) -> int:
        return self.toks[self.i][1] if self.i < len(self.toks) else len(self.text)

    def take(self) -> str:
        t = self.toks[self.i][0]
        self.i += 1
        return t

    def seen(self) -> str:
        t = self.peek()
        return "end of the shape" if t is None else f"'{t}'"

    def fail(self, message: str, offset: int | None = None):
        raise ShapeSyntaxError(message, self.pos() if offset is None else offset)

    def expect(self, tok: str, what: str):
        if self.peek() != tok:
            self.fail(f"expected {what}, got {self.seen()}")
        self.take()

    def expect_end(self, where: str):
        if self.peek() is not None:
            self.fail(f"unexpected {self.seen()} {where}")

    def int_(self, what: str) -> int:
        t = self.peek()
        if t is None or not (t[0].isdigit() or (t[0] == "-" and len(t) > 1)):
            self.fail(f"expected {what}, got {self.seen()}")
        self.take()
        return int(t)

    def _items_to_close(self, item, where: str) -> tuple:
        """Items read by `item()`, separated by ',', up to and including the closing ')'."""
        out = []
        while self.peek() != ")":
            out.append(item())
            if self.peek() == ",":
                self.take()
            elif self.peek() != ")":
                self.fail(f"expected ',' or ')' in {where}, got {self.seen()}")
        self.take()
        return tuple(out)

    def _tile_size(self) -> int:
        if self.peek() == "*":
            self.take()
            return COMBINE_DIM
        return self.int_("an integer or '*' in a tile")

    # -- shapes
    def shape(self, depth: int = 0) -> Shape:
        if depth >= MAX_SHAPE_DEPTH and self.peek() in ("(", "b"):
            self.fail(f"the shape nests tuples more than {MAX_SHAPE_DEPTH} deep; hlo handles at most "
                      f"{MAX_SHAPE_DEPTH} levels (XLA's parser: 32768)")
        if self.peek() == "(":
            self.take()
            elems = []
            if self.peek() != ")":
                while True:
                    elems.append(self.shape(depth + 1))
                    if self.peek() == ",":
                        self.take()
                        continue
                    break
            self.expect(")", "',' or ')' at the end of the tuple shape")
            return Shape.tuple_of(elems)
        if self.peek() == "b":                 # a buffer shape b(f32[4])
            self.take()
            self.expect("(", "'(' after b")
            inner = self.shape(depth + 1)
            self.expect(")", "')' at the end of the buffer shape")
            return Shape("buffer", tuple_shapes=(inner,))
        return self.array()

    def array_shape(self) -> Shape:
        shape = self.array()
        self.expect_end("after the shape")
        return shape

    def array(self) -> Shape:
        start = self.pos()
        etype = self.peek()
        if etype is None or not etype[0].isalpha():
            self.fail(f"expected a shape such as f32[2,3], got {self.seen()}")
        if etype not in ELEMENT_TYPES:
            self.fail(f"unknown element type '{etype}'")
        self.take()
        self.expect("[", f"'[' after the element type {etype}")
        dims: list[int] = []
        dyn: list[bool] = []
        if self.peek() != "]":
            while True:
                t = self.peek()
                if t == "?":
                    self.take()
                    dims.append(UNBOUNDED)
                    dyn.append(True)
                else:
                    bounded = t == "<="
                    if bounded:
                        self.take()
                    at = self.pos()
                    d = self.int_("an integer dimension size" if not bounded else "an integer bound after '<='")
                    if d < 0:
                        self.fail(f"invalid dimension size {d}: dimension sizes must be >= 0", at)
                    if d > MAX_DIMENSION:
                        self.fail(f"dimension size {d} is too large (at most 2^63-1 = {MAX_DIMENSION})", at)
                    dims.append(d)
                    dyn.append(bounded)
                if self.peek() == ",":
                    self.take()
                    continue
                break
        self.expect("]", "',' or ']' in the dimension list")
        dims_t = tuple(dims)
        if etype in ("token", "opaque"):
            if dims_t:
                self.fail(f"{etype} shapes have no dimensions: write {etype}[]", start)
            if self.peek() == "{" and self.peek(1) == "}":
                self.fail("expected an opcode after the shape, got '{}' ('{}' is not a layout)")
            return Shape(etype)
        layout = None
        t = self.peek()
        if t == "{":
            layout = self.layout(len(dims_t), self.text[start:self.toks[self.i - 1][1] + 1], "{", "}")
        elif t == "<":
            layout = self.layout(len(dims_t), self.text[start:self.toks[self.i - 1][1] + 1], "<", ">")
        if layout is None:
            layout = default_layout(len(dims_t))
        return Shape(etype, dims_t, tuple(dyn), layout)

    def layout(self, rank: int, shape_text: str, open_: str, close: str) -> Layout:
        open_at = self.pos()
        self.take()
        if self.peek() == close:
            if open_ == "{":
                self.fail("expected an opcode after the shape, got '{}' ('{}' is not a layout: a layout lists "
                          "the minor_to_major dimensions, e.g. {1,0})", open_at)
            self.fail(f"empty layout '{open_}{close}': list the minor_to_major dimensions, e.g. <1,0>", open_at)
        m2m: list[int] = []
        if self.peek() not in (":", close):
            while True:
                m2m.append(self.int_("an integer (a minor_to_major dimension) in the layout"))
                if self.peek() == ",":
                    self.take()
                    continue
                break
        fields: dict = {}
        if self.peek() == ":" and open_ == "{":
            self.take()
            self.suffixes(fields)
        if self.peek() != close:
            t = self.peek()
            hint = ""
            if t in _SUFFIX_ORDER and fields:
                if t in fields.get("_seen", ()):
                    hint = f": {t}(...) is given twice"
                else:
                    later = [s for s in fields.get("_seen", ()) if _SUFFIX_ORDER.index(s) > _SUFFIX_ORDER.index(t)]
                    hint = f": {t}(...) must come before {later[0]}(...)" if later else ""
                hint += " (layout suffixes go in the order D T L # * E S SC P M)"
            elif t in _SUFFIX_ORDER:
                hint = " (layout suffixes follow a ':' after the minor_to_major list)"
            elif t is not None and t.isalpha():
                hint = " (not a layout suffix: known ones are D T L # * E S SC P M)"
            self.fail(f"expected '{close}' at the end of the layout, got {self.seen()}{hint}")
        self.take()
        fields.pop("_seen", None)
        if len(m2m) != rank:
            self.fail(f"layout {_m2m_text(m2m, open_, close)} has {len(m2m)} minor_to_major "
                      f"entr{'y' if len(m2m) == 1 else 'ies'} but the shape {shape_text} has rank {rank}", open_at)
        return Layout(tuple(m2m), **fields)

    def suffixes(self, fields: dict):
        seen: list[str] = []
        fields["_seen"] = seen
        while True:
            key = self.peek()
            if key not in _SUFFIX_ORDER or self.peek(1) != "(":
                return
            if seen and (key in seen or _SUFFIX_ORDER.index(key) < _SUFFIX_ORDER.index(seen[-1])):
                return      # out of order or repeated: the caller reports "expected '}'"
            at = self.pos()
            seen.append(key)
            self.take()
            if key == "D":
                self.take()
                start = self.pos()
                while self.peek() not in (")", None):
                    self.take()
                body = self.text[start:self.pos()]
                self.expect(")", "')' after the dim level types")
                items = [x.strip() for x in body.split(",")] if body.strip() else []
                off = start
                for x, raw in zip(items, body.split(",")):
                    # XLA: D (dense), C (compressed), S (singleton) or H (loose compressed), then
                    # optionally '+' (not unique) and '~' (not ordered)
                    if not _DIM_LEVEL.fullmatch(x):
                        self.fail(f"expected a DimLevelType abbreviation (D, C, S or H, then optionally + and ~), "
                                  f"got '{x}'", off + len(raw) - len(raw.lstrip()))
                    off += len(raw) + 1
                fields["dim_level_types"] = tuple(items)
            elif key == "T":
                tiles = []
                while self.peek() == "(":
                    self.take()
                    tiles.append(self._items_to_close(self._tile_size, "a tile"))
                fields["tiles"] = tuple(tiles)
            elif key in ("#", "*"):
                self.take()
                t = self.peek()
                if t not in ELEMENT_TYPES:
                    self.fail(f"expected an element type in {key}(...), got {self.seen()}")
                self.take()
                self.expect(")", f"')' after the {'index' if key == '#' else 'pointer'} type")
                fields["index_primitive_type" if key == "#" else "pointer_primitive_type"] = t
            elif key == "SC":
                scs = []
                while self.peek() == "(":
                    self.take()
                    d = self.int_("a dimension in a split config")
                    self.expect(":", "':' in a split config (dimension:indices)")
                    idx = self._items_to_close(lambda: self.int_("an integer split index"), "a split config")
                    scs.append(SplitConfig(d, idx))
                fields["split_configs"] = tuple(scs)
            elif key == "P":
                self.fail("a physical shape P(...) is not allowed in the layout of an array", at)
            else:
                self.take()
                v = self.int_(f"an integer in {key}(...)")
                self.expect(")", f"')' after {key}({v}")
                name = {"L": "tail_padding_alignment", "E": "element_size_in_bits", "S": "memory_space",
                        "M": "dynamic_shape_metadata_prefix_bytes"}[key]
                fields[name] = v


def _m2m_text(m2m, open_, close) -> str:
    return open_ + ",".join(map(str, m2m)) + close
