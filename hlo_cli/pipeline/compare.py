"""Comparing results with a reference: tolerances, mismatch reports, and reading the reference
(header first: an array whose shape cannot match its result is never read)."""
from __future__ import annotations

import numpy as np

from ..errors import HloInputError
from .io import ArrayFile, ArrayHeader, scalar_str


def _fits(shape: tuple, dims: tuple, dynamic: tuple) -> bool:
    """An array of `shape` can be the value of a result of `dims`: equal dims, and at most the
    bound for a bounded dynamic dimension (f32[<=12] holds 6 elements at run time)."""
    return len(shape) == len(dims) and all(n == d or (dyn and n <= d)
                                           for n, d, dyn in zip(shape, dims, dynamic))


def load_reference(path: str, result_shapes) -> dict:
    """--expect PATH: an .npz with keys out0, out1, ...; or one .npy for a single result.
    RESULT_SHAPES: each result leaf's dims, or (dims, dynamic flags) for one with dynamic
    dimensions, in order.  An array whose shape cannot be its result's (or that is not among the
    results) is returned as its ArrayHeader, unread."""
    what = f"--expect {path}"
    wanted = {}
    for k, s in enumerate(result_shapes):
        dims, dynamic = (tuple(s[0]), tuple(s[1])) if len(s) == 2 and isinstance(s[0], (tuple, list)) \
            else (tuple(s), (False,) * len(s))
        wanted[f"out{k}"] = (dims, dynamic)
    with ArrayFile(path, what) as af:
        if af.is_archive and not af.headers:
            raise HloInputError(f"{what}: the archive holds no arrays")
        keyed = {k: k for k in af.headers} if af.is_archive else {"out0": None}
        ref = {}
        for key, member in keyed.items():
            h = af.headers[member]
            readable = h.dtype.kind in "biufcV" and h.dtype.itemsize <= 16
            fits = key in wanted and _fits(tuple(h.shape), *wanted[key])
            ref[key] = af.load(member) if fits and readable else h
        return ref


def load_results_of(path: str, module) -> dict:
    """load_reference for the results of MODULE (its ROOT's leaves, by their dimensions)."""
    root = module.entry_computation.root_instruction.shape
    leaves = list(root.leaves()) if root.is_tuple else [root]
    return load_reference(path, [s.dims for s in leaves])


def compare(leaves, reference, rtol: float, atol: float) -> dict:
    """Each result leaf against the reference: |got - want| <= atol + rtol * |want| elementwise, NaN
    equal to NaN, infinities equal to themselves.  Returns {"ok": bool, "rows": [one per key]}."""
    rows, ok = [], True
    keys = [f"out{k}" for k in range(len(leaves))]
    for key, got in zip(keys, leaves):
        if key not in reference:
            rows.append({"key": key, "status": "missing in the reference"})
            ok = False
            continue
        row = _compare_one(key, got, reference[key], rtol, atol)
        ok = ok and row["status"] == "ok"
        rows.append(row)
    for k in sorted(set(reference) - set(keys)):
        rows.append({"key": k, "status": "not among the results"})
        ok = False
    return {"ok": ok, "rows": rows}


def _compare_one(key, got, want, rtol, atol) -> dict:
    if isinstance(want, ArrayHeader) and tuple(want.shape) != got.shape:
        return {"key": key, "status": f"shape {list(got.shape)} vs the reference's {list(want.shape)}"}
    if isinstance(want, ArrayHeader):
        return {"key": key, "status": f"cannot compare {got.dtype} with the reference's {want.dtype}"}
    want = np.asarray(want)
    if want.dtype.kind == "V":
        if want.dtype.itemsize != got.dtype.itemsize:
            return {"key": key, "status": f"reference holds raw {want.dtype.itemsize}-byte records, "
                                          f"the result is {got.dtype}"}
        want = want.view(got.dtype)
    if want.shape != got.shape:
        return {"key": key, "status": f"shape {list(got.shape)} vs the reference's {list(want.shape)}"}
    try:
        cplx = got.dtype.kind == "c" or want.dtype.kind == "c"
        g = got.astype(np.complex128 if cplx else np.float64)
        w = want.astype(np.complex128 if cplx else np.float64)
    except (TypeError, ValueError):
        return {"key": key, "status": f"cannot compare {got.dtype} with the reference's {want.dtype}"}
    close, diff, finite, max_abs, max_rel = differences(g, w, rtol, atol)
    bad = int((~close).sum())
    row = {"key": key, "status": "ok" if bad == 0 else "mismatch", "mismatched": bad, "size": int(g.size),
           "max_abs_diff": max_abs, "max_rel_diff": max_rel}
    if got.dtype != want.dtype:
        row["note"] = f"dtype {got.dtype} vs the reference's {want.dtype}"
    if bad:
        first = tuple(int(i) for i in np.argwhere(~close)[0])
        row.update(first_index=list(first), got=scalar_str(got[first], got), want=scalar_str(want[first], want))
    return row


def differences(value, reference, rtol: float, atol: float) -> tuple:
    """How VALUE differs from REFERENCE (arrays of one shape, widened to float64 or complex128):
    (where they are close as numpy.isclose says, NaN equal to NaN; |value - reference|; where that
    is finite; its largest finite value; the largest finite relative difference, over the places
    where the reference is not zero), the maxima 0.0 where there is none."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        close = np.isclose(value, reference, rtol=rtol, atol=atol, equal_nan=True)
        diff = np.abs(value - reference)
        rel = diff / np.abs(reference)
    finite = np.isfinite(diff)
    rfin = finite & (np.abs(reference) > 0)
    return (close, diff, finite, float(diff[finite].max()) if finite.any() else 0.0,
            float(rel[rfin].max()) if rfin.any() else 0.0)
