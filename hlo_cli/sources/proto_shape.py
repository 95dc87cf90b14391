"""Shapes of XLA's module protos: a ShapeProto (with its LayoutProto) as the IR's Shape, and the
element types' numbers.  What does not describe a shape raises ProtoError (`where` names the
computation and instruction)."""
from __future__ import annotations

from ..ir.shape import COMBINE_DIM, UNBOUNDED, Layout, Shape, SplitConfig, default_layout

INT64_MIN = -(2**63)          # XLA's kUnboundedSize (a `?` dimension)


class ProtoError(ValueError):
    """A module proto that does not describe a module (`where` names the computation/instruction)."""


# element types: PrimitiveType number -> HLO spelling
PRIMITIVE_TYPES = {
    1: "pred", 30: "s1", 26: "s2", 21: "s4", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 31: "u1", 27: "u2",
    22: "u4", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16", 11: "f32", 16: "bf16", 12: "f64",
    19: "f8e5m2", 28: "f8e4m3", 20: "f8e4m3fn", 23: "f8e4m3b11fnuz", 29: "f8e3m4", 24: "f8e5m2fnuz",
    25: "f8e4m3fnuz", 32: "f4e2m1fn", 33: "f8e8m0fnu", 15: "c64", 18: "c128", 13: "tuple",
    14: "opaque", 17: "token", 34: "buffer", 35: "f6e3m2fn", 36: "f6e2m3fn",
}
_DIM_LEVEL = {0: "D", 1: "C", 2: "S", 3: "H"}


def element_type_name(number: int, where: str = "") -> str:
    name = PRIMITIVE_TYPES.get(number)
    if name is None:
        raise ProtoError(f"{where}element type {number} is not one this schema knows "
                         "(PrimitiveType; a newer XLA?)")
    return name


def shape_of(sp, where: str = "", depth: int = 0) -> Shape:
    """The IR Shape of a ShapeProto (memoized by its bytes: a module repeats few shapes)."""
    if depth == 0:
        key = sp.SerializeToString()
        got = _SHAPES.get(key)
        if got is None:
            got = _shape_of(sp, where, 0)
            if len(_SHAPES) > 4096:
                _SHAPES.clear()
            _SHAPES[key] = got
        return got
    return _shape_of(sp, where, depth)


_SHAPES: dict[bytes, Shape] = {}


def _shape_of(sp, where: str, depth: int) -> Shape:
    if depth > 100:
        raise ProtoError(f"{where}a shape nested more than 100 tuples deep")
    et = element_type_name(sp.element_type, where)
    if et == "tuple":
        return Shape.tuple_of(shape_of(s, where, depth + 1) for s in sp.tuple_shapes)
    if et == "buffer":
        if len(sp.tuple_shapes) != 1:
            raise ProtoError(f"{where}a buffer shape must hold one array shape")
        return Shape("buffer", tuple_shapes=(shape_of(sp.tuple_shapes[0], where, depth + 1),))
    if et in ("token", "opaque"):
        return Shape(et)
    dims, dyn = [], []
    flags = list(sp.is_dynamic_dimension)
    for k, d in enumerate(sp.dimensions):
        d = int(d)
        is_dyn = flags[k] if k < len(flags) else False
        if d == INT64_MIN:
            d, is_dyn = UNBOUNDED, True
        elif d < 0:
            raise ProtoError(f"{where}negative dimension {d} in a shape")
        dims.append(d)
        dyn.append(bool(is_dyn))
    layout = _layout(sp.layout, len(dims), where) if sp.HasField("layout") else None
    return Shape.array(et, dims, layout, dyn)


def _layout(lp, rank: int, where: str) -> Layout:
    m2m = tuple(int(x) for x in lp.minor_to_major)
    if not m2m and rank:
        m2m = default_layout(rank).minor_to_major
    if sorted(m2m) != list(range(rank)):
        raise ProtoError(f"{where}layout minor_to_major {list(m2m)} is not a permutation of the {rank} "
                         "dimensions")
    dlt = []
    if lp.dim_level_types:
        uniq = list(lp.dim_unique)
        ordered = list(lp.dim_ordered)
        for k, t in enumerate(lp.dim_level_types):
            s = _DIM_LEVEL.get(t)
            if s is None:
                raise ProtoError(f"{where}dim level type {t} unknown")
            if k < len(uniq) and not uniq[k]:
                s += "+"
            if k < len(ordered) and not ordered[k]:
                s += "~"
            dlt.append(s)
    tiles = tuple(tuple(int(d) if d != COMBINE_DIM else COMBINE_DIM for d in t.dimensions) for t in lp.tiles)
    idx = element_type_name(lp.index_primitive_type, where) if lp.index_primitive_type else None
    ptr = element_type_name(lp.pointer_primitive_type, where) if lp.pointer_primitive_type else None
    phys = shape_of(lp.physical_shape, where) if lp.HasField("physical_shape") else None
    return Layout(m2m, tuple(dlt), tiles, int(lp.tail_padding_alignment_in_elements) or 1, idx, ptr,
                  int(lp.element_size_in_bits), int(lp.memory_space),
                  tuple(SplitConfig(int(s.dimension), tuple(int(i) for i in s.split_indices))
                        for s in lp.split_configs),
                  phys, int(lp.dynamic_shape_metadata_prefix_bytes))
