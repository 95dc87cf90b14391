"""Runtime values: NumPy arrays (ml_dtypes for the narrow types), tuples of values, and tokens.

A value of an array shape is an ndarray whose dtype is the element type's NumPy dtype and whose
shape is the logical dims (layouts do not change logical values; only `bitcast` looks at them).
A tuple shape's value is a Python tuple of values; a token is the TOKEN singleton.
"""
from __future__ import annotations

import numpy as np

from ..errors import HloEvalError
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.shape import Shape


class _Token:
    __slots__ = ()

    def __repr__(self):
        return "token"


TOKEN = _Token()


def np_dtype(shape_or_type) -> np.dtype:
    """NumPy dtype of an array shape or element-type name."""
    name = shape_or_type if isinstance(shape_or_type, str) else shape_or_type.element_type
    et = ELEMENT_TYPES.get(name)
    if et is None or et.numpy is None:
        raise HloEvalError(f"{name} has no array values")
    return et.numpy


def zeros(shape: Shape):
    if shape.is_tuple:
        return tuple(zeros(s) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return TOKEN
    if shape.element_type == "opaque":
        return None
    return np.zeros(shape.dims, dtype=np_dtype(shape))


def conforms(value, shape: Shape) -> str | None:
    """None if `value` is a value of `shape` (dims and dtype), else a description of the mismatch."""
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.tuple_shapes):
            return f"expected a tuple of {len(shape.tuple_shapes)}, got {describe(value)}"
        for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)):
            why = conforms(v, s)
            if why:
                return f"element {k}: {why}"
        return None
    if shape.element_type == "token":
        return None if value is TOKEN else f"expected a token, got {describe(value)}"
    if shape.element_type == "opaque":
        return None
    if not isinstance(value, np.ndarray):
        return f"expected an array, got {describe(value)}"
    if value.dtype != np_dtype(shape):
        return f"expected dtype {np_dtype(shape)}, got {value.dtype}"
    if not shape.is_dynamic and tuple(value.shape) != tuple(shape.dims):
        return f"expected dims {list(shape.dims)}, got {list(value.shape)}"
    if shape.is_dynamic:
        if len(value.shape) != len(shape.dims) or any(
                (v > d if dyn else v != d) for v, d, dyn in zip(value.shape, shape.dims, shape.dynamic) if d >= 0):
            return f"expected dims within {shape.to_str(False)}, got {list(value.shape)}"
    return None


def describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ")"
    return repr(value)


def leaves(value):
    """Array leaves of a value, depth-first (tokens and opaque values left out)."""
    if isinstance(value, tuple):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, np.ndarray):
        yield value


def random_value(shape: Shape, rng):
    """A value of `shape` drawn from `rng` (--random-inputs, constants whose literal is random)."""
    if shape.is_tuple:
        return tuple(random_value(s, rng) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return TOKEN
    dt = np_dtype(shape)
    dims = tuple(shape.dims)
    kind = np.dtype(dt).kind
    if shape.element_type == "pred":
        return rng.integers(0, 2, dims).astype(np.bool_)
    if kind in "iu" and dt.itemsize * 8 >= 8 and dt in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                                          np.uint16, np.uint32, np.uint64):
        lo = 0 if kind == "u" else -8
        return rng.integers(lo, 8, dims).astype(dt)
    if kind == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt)
    try:
        if np.issubdtype(dt, np.integer) or shape.element_type[0] in "su":
            return rng.integers(0, 2, dims).astype(dt)
    except TypeError:
        pass
    return rng.standard_normal(dims).astype(np.float32).astype(dt)
