"""Binding user arrays to entry parameters, with clear errors naming the parameter."""
from __future__ import annotations

import re

import numpy as np

from ..errors import HloInputError
from ..ir.shape import Shape
from .values import TOKEN, np_dtype


def _fail(msg: str):
    raise HloInputError(msg)


def coerce(value, shape: Shape, what: str):
    """`value` as a runtime value of `shape`, or an HloInputError saying what is wrong with it."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            _fail(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values for {shape.to_str(False)}, "
                  f"got {_given(value)}")
        return tuple(coerce(v, s, f"{what}[{k}]") for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    if shape.element_type == "token":
        return TOKEN
    want = np_dtype(shape)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        _fail(f"{what}: expected {shape.to_str(False)}, got {type(value).__name__} ({e})")
    if arr.dtype.kind == "V" and arr.dtype != want:
        # ml_dtypes arrays (bfloat16, float8, int4, ...) come back from .npy as raw records (|V2, |V1)
        if arr.dtype.fields is None and arr.dtype.itemsize == want.itemsize:
            arr = arr.view(want)
        else:
            _fail(f"{what}: expected {shape.to_str(False)} ({want}, {want.itemsize}-byte elements), got raw "
                  f"records of {arr.dtype.itemsize} bytes ({arr.dtype.str}) of shape {list(arr.shape)}")
    if arr.dtype != want and arr.dtype.byteorder in "<>" and arr.dtype.newbyteorder("=") == want:
        arr = arr.astype(want)                  # the same type in the other byte order
    if arr.dtype != want:
        if _safe_cast(arr, want):
            arr = arr.astype(want)
        else:
            _fail(f"{what}: expected {shape.to_str(False)} ({want}), got {_given(arr)}")
    dims = tuple(shape.dims)
    if shape.is_dynamic:
        ok = len(arr.shape) == len(dims) and all(
            (a <= d if dyn else a == d) for a, d, dyn in zip(arr.shape, dims, shape.dynamic) if d >= 0)
    else:
        ok = tuple(arr.shape) == dims
    if not ok:
        _fail(f"{what}: expected shape {shape.to_str(False)}, got {_given(arr)}")
    # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _given(value) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


def _safe_cast(arr: np.ndarray, want: np.dtype) -> bool:
    """Python scalars and lists arrive as int64/float64/bool: accept them where no value changes."""
    if arr.dtype == want:
        return True
    if arr.ndim == 0 or arr.dtype in (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_)):
        if arr.dtype.kind == "O":
            return False
        try:
            with np.errstate(all="ignore"):
                back = arr.astype(want).astype(arr.dtype)
        except (TypeError, ValueError, OverflowError):
            return False
        with np.errstate(invalid="ignore"):
            return bool(np.array_equal(back, arr, equal_nan=arr.dtype.kind in "fc"))
    return False


def bind(params, positional=(), named=None, origins=None):
    """Values for the entry parameters (Instructions sorted by number) from positional and named
    inputs; every missing, extra, mis-shaped or mis-typed input is an HloInputError naming the
    parameter, its expected shape and what was given.

    Positional inputs fill the parameters in order (token parameters take no input); a name is a
    parameter's name, its name without the `.N` suffix JAX adds (when that is unambiguous), or
    `argN` for parameter number N.  `origins` = (list, dict) says where each input came from
    (a file name) for the messages."""
    named = dict(named or {})
    pos_origin, named_origin = origins if origins is not None else ([], {})
    values: list = [None] * len(params)
    data_params = [k for k, p in enumerate(params) if not _is_token(p.shape)]
    if len(positional) > len(data_params):
        _fail(f"{len(positional)} inputs given but the entry computation takes {len(data_params)} parameter"
              f"{'s' if len(data_params) != 1 else ''} ({_sig(params)})")

    def what(k, origin):
        return _label(params[k]) + (f" (from {origin})" if origin else "")

    for n, v in enumerate(positional):
        k = data_params[n]
        values[k] = coerce(v, params[k].shape, what(k, pos_origin[n] if n < len(pos_origin) else None))
    by_name = {p.name: k for k, p in enumerate(params)}
    stems: dict[str, list[int]] = {}
    for k, p in enumerate(params):
        stem = re.sub(r"\.\d+$", "", p.name)
        if stem != p.name:
            stems.setdefault(stem, []).append(k)
    for key, v in named.items():
        k = by_name.get(key)
        if k is None and key in stems:
            if len(stems[key]) > 1:
                _fail(f"input '{key}' is ambiguous: it could be " +
                      " or ".join(f"'{params[j].name}'" for j in stems[key]) + "; use the full name")
            k = stems[key][0]
        if k is None and re.fullmatch(r"arg\d+", key):
            k = int(key[3:])
            if k >= len(params):
                _fail(f"input '{key}': the entry computation has only {len(params)} parameter"
                      f"{'s' if len(params) != 1 else ''} ({_sig(params)})")
        if k is None:
            _fail(f"input '{key}' names no parameter; the parameters are {_sig(params)}")
        if values[k] is not None:
            _fail(f"{_label(params[k])} is given twice (by position and as '{key}')"
                  if k in data_params[:len(positional)] else f"{_label(params[k])} is given twice")
        values[k] = coerce(v, params[k].shape, what(k, named_origin.get(key)))
    missing = [params[k] for k, v in enumerate(values) if v is None and not _is_token(params[k].shape)]
    if missing:
        _fail("missing input for " + ", ".join(f"{_label(p)} ({p.shape.to_str(False)})" for p in missing))
    return [TOKEN if v is None else v for v in values]


def _is_token(shape: Shape) -> bool:
    return not shape.is_tuple and shape.element_type == "token"


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
