"""XLA's LiteralProto <-> NumPy arrays (and tuples of them).

How XLA stores each element type (xla/literal.cc, Piece::WriteToProto / CopyFromProto): pred as
repeated bool; s32, s64, u32, u64, f32, f64 as repeated numbers; c64 / c128 as interleaved real,
imaginary numbers; s8 / u8 and every narrow type (s1, s2, s4, u1, u2, u4, the f8 types, f4e2m1fn)
as bytes, one byte per element; s16, u16, f16, bf16 as little-endian bytes.  The elements are in
the order of the literal's layout (its minor_to_major), which is not always the logical row-major
order.

Sizes are checked before anything is allocated: a literal claiming more elements than its data
holds, or more than `max_elements`, is refused (ProtoError).
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import ELEMENT_TYPES
from ..ir.shape import NUMPY_MAX_RANK, Shape, default_layout
from .proto_shape import PRIMITIVE_TYPES, ProtoError, shape_of

#: the most elements one literal may claim (1 << 31, 8 GiB of f32); the data must hold them too
MAX_ELEMENTS = 1 << 31

# element type -> (LiteralProto field, how it is stored)
_REPEATED = {"pred": "preds", "s32": "s32s", "s64": "s64s", "u32": "u32s", "u64": "u64s", "f32": "f32s",
             "f64": "f64s"}
_COMPLEX = {"c64": ("c64s", np.float32), "c128": ("c128s", np.float64)}
_BYTES = {"s8": "s8s", "u8": "u8s", "s16": "s16s", "u16": "u16s", "f16": "f16s", "bf16": "bf16s",
          "s1": "s1s", "s2": "s2s", "s4": "s4s", "u1": "u1s", "u2": "u2s", "u4": "u4s",
          "f4e2m1fn": "f4e2m1fns", "f8e3m4": "f8e3m4s", "f8e4m3b11fnuz": "f8e4m3b11fnuzs",
          "f8e4m3fn": "f8e4m3fns", "f8e4m3fnuz": "f8e4m3fnuzs", "f8e4m3": "f8e4m3s",
          "f8e5m2fnuz": "f8e5m2fnuzs", "f8e5m2": "f8e5m2s", "f8e8m0fnu": "f8e8m0fnus",
          "f6e2m3fn": "f6e2m3fns", "f6e3m2fn": "f6e3m2fns"}
_NARROW_INT = {"s1", "s2", "s4", "u1", "u2", "u4"}


def _count(shape: Shape, where: str, limit: int) -> int:
    n = 1
    for d in shape.dims:
        if d < 0:
            raise ProtoError(f"{where}a literal of dynamic or negative size {shape}")
        n *= d
        if n > limit:
            raise ProtoError(f"{where}a literal of shape {shape} claims {_big(shape)} elements, more than the "
                             f"{limit:,} hlo reads")
    return n


def _big(shape: Shape) -> str:
    n = 1
    for d in shape.dims:
        n *= d
    return f"{n:,}"


def _to_logical(flat: np.ndarray, shape: Shape) -> np.ndarray:
    """Elements in the layout's order -> the logical (row-major) array."""
    dims = shape.dims
    lay = shape.layout
    m2m = lay.minor_to_major if lay is not None and len(lay.minor_to_major) == len(dims) else None
    if m2m is None or m2m == default_layout(len(dims)).minor_to_major:
        return flat.reshape(dims)
    major = list(reversed(m2m))
    phys = flat.reshape([dims[d] for d in major])
    inv = np.argsort(major)
    return np.ascontiguousarray(phys.transpose(inv))


def _to_physical(arr: np.ndarray, shape: Shape) -> np.ndarray:
    dims = shape.dims
    lay = shape.layout
    m2m = lay.minor_to_major if lay is not None and len(lay.minor_to_major) == len(dims) else None
    if m2m is None or m2m == default_layout(len(dims)).minor_to_major:
        return arr.reshape(-1)
    return np.ascontiguousarray(arr.transpose(list(reversed(m2m)))).reshape(-1)


def literal_value(lp, shape: Shape, where: str = "", limits=None) -> np.ndarray:
    """The array of an array-shaped LiteralProto (`shape`: the IR shape it must have)."""
    et = shape.element_type
    info = ELEMENT_TYPES.get(et)
    if info is None or info.numpy is None:
        raise ProtoError(f"{where}a literal of element type {et} cannot be read")
    if len(lp.dynamic_sizes):
        raise ProtoError(f"{where}a literal of dynamic size (dynamic_sizes) is not read yet")
    if shape.rank > NUMPY_MAX_RANK:
        raise ProtoError(f"{where}a literal of {shape.rank} dimensions: hlo holds arrays of at most "
                         f"{NUMPY_MAX_RANK} (NumPy's limit; XLA has none)")
    limit = MAX_ELEMENTS if limits is None else limits
    n = _count(shape, where, limit)
    dt = info.numpy
    if et in _REPEATED:
        field = _REPEATED[et]
        vals = getattr(lp, field)
        if len(vals) != n:
            raise ProtoError(f"{where}a {shape} literal needs {n} values in '{field}', it holds {len(vals)}")
        flat = np.array(vals, dtype=dt) if n else np.zeros(0, dt)
    elif et in _COMPLEX:
        field, part = _COMPLEX[et]
        vals = getattr(lp, field)
        if len(vals) != 2 * n:
            raise ProtoError(f"{where}a {shape} literal needs {2 * n} numbers in '{field}', it holds {len(vals)}")
        pairs = np.array(vals, dtype=part).reshape(n, 2) if n else np.zeros((0, 2), part)
        flat = np.empty(n, dt)
        flat.real, flat.imag = pairs[:, 0], pairs[:, 1]
    elif et in _BYTES:
        field = _BYTES[et]
        data = getattr(lp, field)
        width = dt.itemsize
        if len(data) == n * width and et in _NARROW_INT:
            # one byte per element, its low bits the value (wrapping gives the same value whether
            # the byte is sign-extended or not)
            flat = np.frombuffer(data, dtype=np.int8 if info.kind == "int" else np.uint8).astype(dt)
        elif len(data) == n * width:
            flat = np.frombuffer(data, dtype=dt).copy()      # little-endian, as XLA writes them
        elif et in _NARROW_INT | {"f4e2m1fn"} and len(data) == -(-n * info.bits // 8):
            bits = info.bits
            raw = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:n * bits].reshape(n, bits)
            vals = (raw.astype(np.uint8) << np.arange(bits, dtype=np.uint8)).sum(axis=1).astype(np.uint8)
            if info.kind == "int":
                vals = np.where(vals >= (1 << (bits - 1)), vals.astype(np.int16) - (1 << bits), vals)
                flat = vals.astype(np.int8).astype(dt)
            elif et == "f4e2m1fn":
                flat = vals.view(dt)
            else:
                flat = vals.astype(dt)
        else:
            raise ProtoError(f"{where}a {shape} literal needs {n * width} bytes in '{field}', it holds {len(data)}")
    else:
        raise ProtoError(f"{where}a literal of element type {et} cannot be read")
    return _to_logical(flat.reshape(-1), shape)


def literal_ir(lp, shape: Shape, where: str = "", limits=None):
    """The IR's Literal of a LiteralProto of SHAPE (a tuple literal element by element).  Raises
    ProtoError."""
    from ..ir.literal import Literal
    if shape.is_tuple:
        parts = list(lp.tuple_literals)
        if len(parts) != len(shape.tuple_shapes):
            raise ProtoError(f"{where}a tuple literal of {len(parts)} elements for a tuple shape of "
                             f"{len(shape.tuple_shapes)}")
        return Literal(shape, tuple(literal_ir(p, s, where, limits) for p, s in zip(parts, shape.tuple_shapes)))
    return Literal(shape, literal_value(lp, shape, where, limits))


def literal_to_numpy(lp, where: str = "", limits=None):
    """A LiteralProto as an ndarray, or a tuple (of ndarrays and tuples) for a tuple literal."""
    if not lp.HasField("shape"):
        raise ProtoError(f"{where}a literal without a shape")
    shape = shape_of(lp.shape, where)
    return _value(lp, shape, where, limits, 0)


def _value(lp, shape: Shape, where, limits, depth):
    if depth > 100:
        raise ProtoError(f"{where}a literal nested more than 100 tuples deep")
    if shape.is_tuple:
        parts = list(lp.tuple_literals)
        if len(parts) != len(shape.tuple_shapes):
            raise ProtoError(f"{where}a tuple literal of {len(parts)} elements for a tuple shape of "
                             f"{len(shape.tuple_shapes)}")
        return tuple(_value(p, s, where, limits, depth + 1) for p, s in zip(parts, shape.tuple_shapes))
    if shape.element_type in ("token", "opaque"):
        return np.zeros((), np.bool_)
    return literal_value(lp, shape, where, limits)


# ----------------------------------------------------------------------------- encoding

def _shape_proto(msgs, shape: Shape):
    numbers = {v: k for k, v in PRIMITIVE_TYPES.items()}
    sp = msgs["ShapeProto"]()
    if shape.is_tuple:
        sp.element_type = numbers["tuple"]
        for s in shape.tuple_shapes:
            sp.tuple_shapes.append(_shape_proto(msgs, s))
        return sp
    sp.element_type = numbers[shape.element_type]
    sp.dimensions.extend(shape.dims)
    sp.is_dynamic_dimension.extend([False] * len(shape.dims))
    lay = shape.layout or default_layout(len(shape.dims))
    sp.layout.minor_to_major.extend(lay.minor_to_major)
    return sp


def literal_from_numpy(value, element_type: str | None = None):
    """A LiteralProto for an ndarray (or a tuple of them), with the default layout.  `element_type`
    names the HLO type when the dtype alone does not say (None: from the dtype)."""
    from .proto_schema import messages
    msgs = messages()
    lp = msgs["LiteralProto"]()
    if isinstance(value, tuple):
        lp.shape.CopyFrom(_shape_proto(msgs, Shape.tuple_of(
            Shape.array(_et_of(v, None), np.shape(v)) if not isinstance(v, tuple) else _tuple_shape(v)
            for v in value)))
        for v in value:
            lp.tuple_literals.append(literal_from_numpy(v))
        return lp
    arr = np.asarray(value)
    et = element_type or _et_of(arr, None)
    shape = Shape.array(et, arr.shape)
    lp.shape.CopyFrom(_shape_proto(msgs, shape))
    flat = arr.reshape(-1)
    if et in _REPEATED:
        getattr(lp, _REPEATED[et]).extend(flat.tolist())
    elif et in _COMPLEX:
        field, part = _COMPLEX[et]
        inter = np.empty(2 * flat.size, part)
        inter[0::2], inter[1::2] = flat.real, flat.imag
        getattr(lp, field).extend(inter.tolist())
    else:
        info = ELEMENT_TYPES[et]
        if info.bits < 8 and info.kind in ("int", "uint"):
            data = flat.astype(np.int8 if info.kind == "int" else np.uint8).tobytes()
        else:
            data = np.ascontiguousarray(flat).tobytes() if info.bits >= 8 or et == "f4e2m1fn" else flat.tobytes()
        setattr(lp, _BYTES[et], data)
    return lp


def _tuple_shape(v) -> Shape:
    return Shape.tuple_of(_tuple_shape(x) if isinstance(x, tuple) else Shape.array(_et_of(x, None), np.shape(x))
                          for x in v)


def _et_of(arr, given):
    from ..ir.dtypes import from_numpy
    if given:
        return given
    et = from_numpy(np.asarray(arr).dtype)
    if et is None:
        raise ValueError(f"no HLO element type for dtype {np.asarray(arr).dtype}")
    return et.name
