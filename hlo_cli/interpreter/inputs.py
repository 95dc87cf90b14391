"""Binding user arrays to entry parameters, with clear errors naming the parameter."""
from __future__ import annotations

import re

import numpy as np

from ..errors import HloInputError
from ..ir.shape import Shape
from .values import TOKEN, np_dtype, random_value


def _fail(msg: str):
    raise HloInputError(msg)


def coerce(value, shape: Shape, what: str, notes: list | None = None, allow_rounding: bool = False):
    """`value` as a runtime value of `shape`, or an HloInputError saying what is wrong with it.

    Values of another type are converted only where no value changes (Python scalars and lists
    arrive as int64/float64/bool), and, with ALLOW_ROUNDING, float64 arrays for a floating-point
    parameter (rounded as JAX does when it is not in 64-bit mode).  Every conversion adds a line
    to NOTES (when given) saying what was converted and whether any value changed."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            _fail(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values for {shape.to_str(False)}, "
                  f"got {_given(value)}")
        return tuple(coerce(v, s, f"{what}[{k}]", notes, allow_rounding)
                     for k, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    if shape.element_type == "token":
        return TOKEN
    want = np_dtype(shape)
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        _fail(f"{what}: expected {shape.to_str(False)}, got {type(value).__name__} ({e})")
    arr = _reinterpret(arr, want, shape, what)
    if arr.dtype != want:
        if _safe_cast(arr, want):
            if notes is not None:
                notes.append(f"{what}: {arr.dtype} values converted to {want} for {shape.to_str(False)} "
                             f"(no value changed)")
            arr = arr.astype(want)
        elif allow_rounding and _rounds(arr.dtype, shape):
            arr = _round(arr, want, shape, what, notes)
        else:
            _fail(f"{what}: expected {shape.to_str(False)} ({want}), got {_given(arr)}")
    _check_dims(tuple(arr.shape), shape, what, _given(arr))
    # (np.ascontiguousarray would turn a 0-d array into shape (1,))
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _reinterpret(arr, want, shape, what):
    """Raw records of the parameter's width read as its type (ml_dtypes arrays come back from .npy
    as |V2, |V1 records), and the parameter's type in the other byte order read as native."""
    if arr.dtype.kind == "V" and arr.dtype != want:
        if arr.dtype.fields is None and arr.dtype.itemsize == want.itemsize:
            return arr.view(want)
        _raw_records_mismatch(arr.dtype, arr.shape, want, shape, what)
    if arr.dtype != want and arr.dtype.byteorder in "<>" and arr.dtype.newbyteorder("=") == want:
        return arr.astype(want)
    return arr


def _raw_records_mismatch(dt, dims, want, shape, what):
    _fail(f"{what}: expected {shape.to_str(False)} ({want}, {want.itemsize}-byte elements), got raw "
          f"records of {dt.itemsize} bytes ({dt.str}) of shape {list(dims)}")


def _check_dims(dims_given: tuple, shape: Shape, what: str, given: str):
    dims = tuple(shape.dims)
    if shape.is_dynamic:
        ok = len(dims_given) == len(dims) and all(
            (a <= d if dyn else a == d) for a, d, dyn in zip(dims_given, dims, shape.dynamic) if d >= 0)
    else:
        ok = dims_given == dims
    if not ok:
        _fail(f"{what}: expected shape {shape.to_str(False)}, got {given}")


_CAST_SOURCES = (np.dtype(np.int64), np.dtype(np.float64), np.dtype(np.bool_))


def _rounds(dtype, shape: Shape) -> bool:
    """float64 values for a floating-point parameter: converted by rounding."""
    from ..ir.dtypes import ELEMENT_TYPES
    et = ELEMENT_TYPES.get(shape.element_type)
    return dtype == np.float64 and et is not None and et.kind == "float"


def _round(arr, want, shape, what, notes):
    with np.errstate(all="ignore"):
        out = arr.astype(want)
        back = out.astype(np.float64)
    if notes is not None:
        same = (back == arr) | (np.isnan(back) & np.isnan(arr))
        changed = int(arr.size - np.count_nonzero(same))
        overflow = int(np.count_nonzero(np.isfinite(arr) & ~np.isfinite(back)))
        if changed:
            how = f"{changed} of {arr.size} value{'s' if arr.size != 1 else ''} rounded"
            if overflow:
                how += f", {overflow} of them beyond {shape.element_type}'s range (now infinite)"
        else:
            how = "no value changed"
        notes.append(f"{what}: float64 values rounded to {want} for {shape.to_str(False)} ({how})")
    return out


def check_header(header, shape: Shape, what: str) -> bool:
    """Whether an array with HEADER's shape and dtype (not yet read) can be an input for SHAPE;
    an HloInputError if it cannot whatever its values.  False when its values are not needed
    (a token parameter)."""
    dt, dims_given = header.dtype, tuple(header.shape)
    given = header.describe()
    if shape.is_tuple:
        _fail(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values for {shape.to_str(False)}, "
              f"got {given}")
    if shape.element_type == "token":
        return False
    want = np_dtype(shape)
    if dt.kind == "V" and dt != want and (dt.fields is not None or dt.itemsize != want.itemsize):
        _raw_records_mismatch(dt, dims_given, want, shape, what)
    convertible = (dt == want or dt.kind == "V" or (dt.byteorder in "<>" and dt.newbyteorder("=") == want)
                   or (len(dims_given) == 0 and dt.itemsize <= 16) or dt in _CAST_SOURCES)
    if not convertible:
        _fail(f"{what}: expected {shape.to_str(False)} ({want}), got {given}")
    _check_dims(dims_given, shape, what, given)
    return True


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
    if arr.ndim == 0 or arr.dtype in _CAST_SOURCES:
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


def assign(params, n_positional: int, keys) -> tuple[list[int], dict]:
    """Which parameter each input is for, before any value is looked at: N_POSITIONAL inputs fill
    the parameters in order (token parameters take no input), then each name in KEYS is a
    parameter's name, its name without the `.N` suffix JAX adds (when that is unambiguous), or
    `argN` for parameter number N.  Returns (parameter index of each positional input, {key:
    parameter index}); too many inputs, unknown or ambiguous names, a parameter given twice and
    a parameter given none are HloInputErrors."""
    data_params = [k for k, p in enumerate(params) if not _is_token(p.shape)]
    if n_positional > len(data_params):
        _fail(f"{n_positional} inputs given but the entry computation takes {len(data_params)} parameter"
              f"{'s' if len(data_params) != 1 else ''} ({_sig(params)})")
    positional = data_params[:n_positional]
    taken = set(positional)
    by_name = {p.name: k for k, p in enumerate(params)}
    stems: dict[str, list[int]] = {}
    for k, p in enumerate(params):
        stem = re.sub(r"\.\d+$", "", p.name)
        if stem != p.name:
            stems.setdefault(stem, []).append(k)
    named = {}
    for key in keys:
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
        if k in taken:
            _fail(f"{label(params[k])} is given twice (by position and as '{key}')"
                  if k in positional else f"{label(params[k])} is given twice")
        taken.add(k)
        named[key] = k
    missing = [p for k, p in enumerate(params) if k not in taken and not _is_token(p.shape)]
    if missing:
        _fail("missing input for " + ", ".join(f"{label(p)} ({p.shape.to_str(False)})" for p in missing))
    return positional, named


def bind(params, positional=(), named=None, origins=None):
    """Values for the entry parameters (Instructions sorted by number) from positional and named
    inputs (see `assign`); every missing, extra, mis-shaped or mis-typed input is an HloInputError
    naming the parameter, its expected shape and what was given.  `origins` = (list, dict) says
    where each input came from (a file name) for the messages."""
    named = dict(named or {})
    pos_origin, named_origin = origins if origins is not None else ([], {})
    pos_to, named_to = assign(params, len(positional), list(named))
    values: list = [None] * len(params)

    def what(k, origin):
        return label(params[k]) + (f" (from {origin})" if origin else "")

    for n, (k, v) in enumerate(zip(pos_to, positional)):
        values[k] = coerce(v, params[k].shape, what(k, pos_origin[n] if n < len(pos_origin) else None))
    for key, v in named.items():
        k = named_to[key]
        values[k] = coerce(v, params[k].shape, what(k, named_origin.get(key)))
    return [TOKEN if v is None else v for v in values]


def _is_token(shape: Shape) -> bool:
    return not shape.is_tuple and shape.element_type == "token"


def label(p) -> str:
    return f"parameter {p.parameter_number} '{p.name}'"


def _sig(params) -> str:
    return ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params)


def random_inputs(params, seed: int = 0):
    """Deterministic inputs for every parameter: normal floats, small integers, random preds.
    Parameters too big to allocate (together, more than this process can ever hold) are an
    HloResourceError naming the parameter and the bytes it needs, before anything is allocated."""
    from .memory import check_rank, memory_limit, result_bytes
    rng = np.random.default_rng(seed)
    total, limit = 0, memory_limit()
    for p in params:
        if hasattr(p, "opcode"):       # (a parameter's global stand-in was checked as the parameter)
            check_rank(p)
        need = result_bytes(p.shape) or 0
        total += need
        # (values are drawn as float64 or int64 and then converted: 8 more bytes an element meanwhile)
        scratch = 8 * _largest_leaf(p.shape)
        if limit is not None and total + scratch > limit:
            before = total - need         # (the parameters before it count too)
            _too_big(p, need, (f"with the {p.parameter_number} parameters before it and its float64 draw "
                               f"{_human(total + scratch)} in all, " if before > 0 else "")
                     + f"more than this machine can ever hold: {_human(limit)}")
    out = []
    for p in params:
        try:
            out.append(random_value(p.shape, rng))
        except (MemoryError, ValueError) as e:     # ValueError: numpy's "array is too big"
            if isinstance(e, ValueError) and "too big" not in str(e):
                raise
            _too_big(p, result_bytes(p.shape) or 0, "more than can be allocated")
    return out


def _largest_leaf(shape: Shape) -> int:
    """Elements of the largest array leaf of SHAPE."""
    if shape.is_tuple:
        return max((_largest_leaf(s) for s in shape.tuple_shapes), default=0)
    n = 1
    for d in shape.dims:
        n *= max(int(d), 0)
    return n


def _human(n: int) -> str:
    from .memory import human
    return human(n)


def _too_big(p, need: int, why: str):
    from ..errors import HloResourceError
    raise HloResourceError(f"--random-inputs: {label(p)} ({p.shape.to_str(False)}) needs {_human(need)}, {why}",
                           requested_bytes=need)
