"""Binding user arrays to entry parameters, with clear errors naming the parameter."""
from __future__ import annotations

import numpy as np

from ..errors import Diagnostic, HloInputError
from ..ir.shape import Shape
from .values import TOKEN, np_dtype


def _fail(msg: str):
    raise HloInputError(msg, [Diagnostic(msg, "<inputs>", code="I001")])


def coerce(value, shape: Shape, what: str):
    """`value` as a runtime value of `shape`, or an HloInputError saying what is wrong with it."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            _fail(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values for {shape.to_str(False)}")
        return tuple(coerce(v, s, f"{what}[{k}]") for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    if shape.element_type == "token":
        return TOKEN
    want = np_dtype(shape)
    arr = np.asarray(value)
    if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize and arr.dtype != want:
        # ml_dtypes arrays (bfloat16, float8, ...) come back from .npy as raw records (|V2)
        arr = arr.view(want)
    if arr.dtype != want:
        if _safe_cast(arr, want):
            arr = arr.astype(want)
        else:
            _fail(f"{what}: expected {shape.to_str(False)} ({want}), got an array of {arr.dtype}"
                  f"{list(arr.shape)}")
    dims = tuple(shape.dims)
    if shape.is_dynamic:
        ok = len(arr.shape) == len(dims) and all(
            (a <= d if dyn else a == d) for a, d, dyn in zip(arr.shape, dims, shape.dynamic) if d >= 0)
    else:
        ok = tuple(arr.shape) == dims
    if not ok:
        _fail(f"{what}: expected shape {shape.to_str(False)}, got {arr.dtype}{list(arr.shape)}")
    # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _safe_cast(arr: np.ndarray, want: np.dtype) -> bool:
    """Python scalars and lists arrive as int64/float64/bool: accept them where no value changes."""
    if arr.dtype == want:
        return True
    if arr.ndim == 0 or arr.dtype in (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_)):
        try:
            back = arr.astype(want).astype(arr.dtype)
        except (TypeError, ValueError, OverflowError):
            return False
        with np.errstate(invalid="ignore"):
            return bool(np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc"))
    return False


def bind(params, positional=(), named=None):
    """Values for the entry parameters (Instructions sorted by number) from positional and named
    inputs; every missing, extra, mis-shaped or mis-typed input is an HloInputError."""
    named = dict(named or {})
    values: list = [None] * len(params)
    if len(positional) > len(params):
        _fail(f"{len(positional)} inputs given but the entry computation takes {len(params)} parameter"
              f"{'s' if len(params) != 1 else ''} ({_sig(params)})")
    by_name = {p.name: k for k, p in enumerate(params)}
    for k, v in enumerate(positional):
        values[k] = coerce(v, params[k].shape, _label(params[k]))
    for key, v in named.items():
        k = by_name.get(key)
        if k is None and key.startswith("arg") and key[3:].isdigit():
            k = int(key[3:])
            if k >= len(params):
                _fail(f"input '{key}': the entry computation has only {len(params)} parameters ({_sig(params)})")
        if k is None:
            _fail(f"input '{key}' names no parameter; the parameters are {_sig(params)}")
        if values[k] is not None:
            _fail(f"{_label(params[k])} is given twice")
        values[k] = coerce(v, params[k].shape, _label(params[k]))
    missing = [params[k] for k, v in enumerate(values) if v is None and params[k].shape.element_type != "token"]
    if missing:
        _fail("missing input for " + ", ".join(f"{_label(p)} ({p.shape.to_str(False)})" for p in missing))
    return [TOKEN if v is None else v for v in values]


def _label(p) -> str:
    return f"parameter {p.parameter_number} '{p.name}'"


def _sig(params) -> str:
    return ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params)


def random_inputs(params, seed: int = 0):
    """Deterministic inputs for every parameter: normal floats, small integers, random preds."""
    rng = np.random.default_rng(seed)
    return [random_value(p.shape, rng) for p in params]


def random_value(shape: Shape, rng):
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
