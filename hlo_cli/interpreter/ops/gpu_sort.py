"""XLA GPU's CUB calls (radix sort, prefix sum), its top-k kernel, and the TPU's approximate top-k.

* CUB radix sort, XLA GPU's rewrite of a `sort` whose comparator is a plain LT/GT of one operand
  (SortRewriter, xla/backends/gpu/transforms/sort_rewriter.cc): `__cub$DeviceRadixSort` (older
  XLA), `xla.gpu.ext.cub_sort_keys`, `xla.gpu.ext.cub_sort_pairs` and, before the scratch-size
  pass, `xla.gpu.ext.cub_sort_unassigned_scratch_size`.  Operands: keys [, values], both of one
  shape; every row along the last dimension is sorted by its keys (a segmented sort when there
  are more rows); backend_config is the SortOptions proto `{"descending": bool}`.  Result: the
  tuple (keys [, values], u8[scratch bytes]).  Order, that of cub::DeviceRadixSort: stable; integers
  by value; floats by their bits made monotone (sign flipped for positives, all bits for
  negatives), so -NaN < -inf < ... < -0 == +0 < ... < +inf < +NaN, with -0 and +0 equal (CUB's
  documented special case: they keep their input order).  Descending is the reverse order, still
  stable (equal keys in input order).  The scratch buffer's contents are CUB's; here zeros.
* `__gpu$TopK`, XLA GPU's top-k kernel for k <= 16 (TopkSpecializer; f32 / bf16, rank 1 or 2):
  (values, s32 indices) of the k largest entries of each row, descending, ties to the lower
  index (the kernel's comparator `a == b ? ia < ib : a > b`, so -0 == +0).  NaN: the kernel's
  comparator has no order for it and its insertion moves every NaN to the top, so a row with one
  NaN gets it first; we put NaNs first (in index order) for every row, which is what the GPU gives
  for a single NaN per row and may differ from it in the order of several.
* CUB prefix sum, XLA GPU's rewrite of an associative `scan` (add, init zero) along the minor-most
  dimension (ScanRewriter): `xla.gpu.ext.cub_scan` / `xla.gpu.ext.cub_scan_unassigned_scratch_size`,
  one operand, backend_config CubScanOptions {vector_length (1), row_length (the scanned dimension),
  column_length (the other dimensions' product), kind SUM, is_reverse (XLA's kernel refuses true)};
  result (the inclusive sums, u8[scratch]).
* `PartialReduce`, the TPU's approximate top-k step (xla/hlo/builder/lib/approx_topk.cc, what
  jax.lax.approx_max_k / approx_min_k leave in a TPU module when the reduced dimension is longer
  than the TPU tiling, 1024 for rank 1 and 128 otherwise): operands (arrays..., their init values),
  to_apply the comparator, backend_config JSON {log2_reduction, reduction_dim, top_k,
  recall_target, to_apply_type: "comparator"}; result: the arrays with the reduced dimension cut
  to L.  Element i of that dimension falls in bin i mod L (a TPU lane keeps its own best; the
  recall model of approx_topk_shape.cc counts collisions in these L bins), the dimension padded
  with the init values to L * 2^log2_reduction, and each bin keeps its best element by the
  comparator (ties to the lower index).  With aggregate_to_topk the builder then sorts these L
  candidates and slices k, ordinary HLO.
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from . import custom_call as CC
from .custom_call import target

_CUB_SORT = ("__cub$DeviceRadixSort", "xla.gpu.ext.cub_sort_keys", "xla.gpu.ext.cub_sort_pairs",
             "xla.gpu.ext.cub_sort_unassigned_scratch_size", "__cub$DeviceRadixSortUnassignedScratchSize")


def _fail(inst, msg):
    raise HloEvalError(f"custom-call target '{inst.attrs.get('custom_call_target')}': {msg}")


def _txt(x) -> str:
    from .lapack_contract import txt
    return txt(x.dtype, x.shape)


def radix_key(x: np.ndarray) -> np.ndarray:
    """Unsigned keys whose ascending order is cub::DeviceRadixSort's order of x (floats: -0 == +0)."""
    dt = np.dtype(x.dtype)
    width = dt.itemsize * 8
    u = np.dtype(f"u{dt.itemsize}")
    sign = u.type(1 << (width - 1))
    if dt.kind == "u":
        return x.astype(u)
    if dt.kind == "i":
        return x.view(u) ^ sign
    if dt.kind == "b":
        raise TypeError("pred keys")
    bits = np.ascontiguousarray(x).view(u).copy()
    bits[bits == sign] = 0                              # -0 sorts as +0
    neg = (bits & sign) != 0
    return np.where(neg, ~bits, bits | sign)


@target(*_CUB_SORT)
def cub_radix_sort(inst, args, ec):
    """Sorts each row (last dimension) of the keys, carrying the values along; stable; the order of
    cub::DeviceRadixSort (see the module docstring); result (keys [, values], u8 scratch)."""
    if len(args) not in (1, 2):
        _fail(inst, f"takes the keys and optionally the values, got {len(args)} operands")
    keys = np.asarray(args[0])
    vals = np.asarray(args[1]) if len(args) == 2 else None
    if keys.ndim < 1:
        _fail(inst, f"keys must have at least one dimension (rows are sorted along the last), got {_txt(keys)}")
    if vals is not None and vals.shape != keys.shape:
        _fail(inst, f"values must have the keys' shape {list(keys.shape)}, got {_txt(vals)}")
    leaves = CC.leaf_shapes(inst.shape)
    if not inst.shape.is_tuple or len(leaves) != len(args) + 1:
        _fail(inst, f"returns a tuple of {'(keys, values' if vals is not None else '(keys'}, u8 scratch), the "
                    f"declared shape is {inst.shape.to_str(False)}")
    for i, x in enumerate(args):
        x = np.asarray(x)
        if CC.np_dtype(leaves[i]) != x.dtype or tuple(leaves[i].dims) != x.shape:
            _fail(inst, f"result {i} must be {_txt(x)} like operand {i}, the declared shape says "
                        f"{leaves[i].to_str(False)}")
    scratch = leaves[-1]
    if CC.np_dtype(scratch) != np.uint8 or len(scratch.dims) != 1:
        _fail(inst, f"the last result must be the u8[n] scratch buffer, the declared shape says {scratch.to_str(False)}")
    try:
        key = radix_key(keys)
    except TypeError:
        _fail(inst, f"keys must be integers or floats, got {_txt(keys)}")
    opts = CC.backend_attrs(inst)
    desc = opts.get("descending", False)
    if not isinstance(desc, bool):
        _fail(inst, f"backend_config 'descending' must be a bool, got {desc!r}")
    order = np.argsort(~key if desc else key, axis=-1, kind="stable")
    outs = [np.take_along_axis(keys, order, -1)]
    if vals is not None:
        outs.append(np.take_along_axis(vals, order, -1))
    outs.append(np.zeros(scratch.dims, np.uint8))
    return tuple(outs)


@target("__gpu$TopK")
def gpu_topk(inst, args, ec):
    """(values, s32 indices) of the k largest entries of each row (k = the result's last dim),
    descending, ties to the lower index, NaNs first (the module docstring says why)."""
    if len(args) != 1:
        _fail(inst, f"takes one operand, got {len(args)}")
    x = np.asarray(args[0])
    if x.ndim not in (1, 2) or x.dtype.name not in ("float32", "bfloat16"):
        _fail(inst, f"takes an f32 or bf16 array of rank 1 or 2, got {_txt(x)}")
    leaves = CC.leaf_shapes(inst.shape)
    n = x.shape[-1]
    if len(leaves) < 2 or any(tuple(s.dims[:-1]) != x.shape[:-1] or len(s.dims) != x.ndim for s in leaves[:2]) \
            or leaves[0].dims[-1] != leaves[1].dims[-1] or leaves[0].dims[-1] > n \
            or CC.np_dtype(leaves[0]) != x.dtype or CC.np_dtype(leaves[1]) != np.int32:
        _fail(inst, f"returns (values {x.dtype.name}[..., k], s32[..., k]) with k <= {n} and the other dims of "
                    f"{_txt(x)}, the declared shape is {inst.shape.to_str(False)}")
    k = leaves[0].dims[-1]
    wide = x.astype(np.float64)
    rank_key = np.where(np.isnan(wide), np.inf, wide)        # NaN above +inf
    # descending by value; NaNs before +inf; equal values (and -0 / +0) by index
    order = np.lexsort((np.broadcast_to(np.arange(n), x.shape), ~np.isnan(wide), -rank_key), axis=-1)
    order = order[..., :k]
    vals = np.take_along_axis(x, order, -1)
    out = [vals, order.astype(np.int32)] + [None] * (len(leaves) - 2)
    return CC.declared_result(inst, out)


@target("PartialReduce")
def tpu_partial_reduce(inst, args, ec):
    """The TPU's approximate top-k step: per bin (index mod L along reduction_dim) the best element
    by the comparator, the arrays carried along (see the module docstring)."""
    from .. import computations as C
    if len(args) < 2 or len(args) % 2:
        _fail(inst, f"takes the arrays and one init value per array, got {len(args)} operands")
    h = len(args) // 2
    arrays, inits = [np.asarray(a) for a in args[:h]], [np.asarray(a) for a in args[h:]]
    opts = CC.backend_attrs(inst)
    try:
        r, dim = int(opts["log2_reduction"]), int(opts["reduction_dim"])
    except (KeyError, TypeError, ValueError):
        _fail(inst, f"backend_config must give log2_reduction and reduction_dim, got {opts}")
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays) or any(i.shape != () for i in inits) \
            or any(a.dtype != i.dtype for a, i in zip(arrays, inits)):
        _fail(inst, f"the arrays must share one shape and each init value be a scalar of its array's type, got "
                    f"{', '.join(_txt(a) for a in arrays)} and {', '.join(_txt(i) for i in inits)}")
    if not 0 <= dim < len(shape) or r < 0:
        _fail(inst, f"reduction_dim {dim} must name a dimension of {_txt(arrays[0])} and log2_reduction {r} be >= 0")
    leaves = CC.leaf_shapes(inst.shape)
    out_dims = tuple(leaves[0].dims) if leaves else ()
    n = shape[dim]
    L = out_dims[dim] if len(out_dims) == len(shape) else -1
    want = shape[:dim] + (L,) + shape[dim + 1:]
    if len(leaves) != h or L <= 0 or any(tuple(s.dims) != want or CC.np_dtype(s) != a.dtype
                                         for s, a in zip(leaves, arrays)) or L * (1 << r) < n:
        _fail(inst, f"returns the {h} arrays with dimension {dim} cut to L, L * 2^{r} >= {n}; the declared shape is "
                    f"{inst.shape.to_str(False)}")
    comps = inst.attrs.get("called_computations") or ()
    comp = inst.attrs.get("to_apply") or (comps[0] if comps else None)
    if comp is None:
        _fail(inst, "needs its comparator (to_apply)")
    width = L << r
    staged = []
    for a, init in zip(arrays, inits):
        x = np.moveaxis(a, dim, -1)
        pad = np.broadcast_to(init, x.shape[:-1] + (width - n,))
        x = np.concatenate([x, pad], axis=-1).reshape(x.shape[:-1] + (1 << r, L))
        staged.append(np.swapaxes(x, -1, -2))          # (..., L, 2^r): the members of each bin in index order
    best = C.sort_arrays(ec, comp.name, staged, staged[0].ndim - 1, True)
    return tuple(np.ascontiguousarray(np.moveaxis(b[..., 0], -1, dim)) for b in best)


@target("xla.gpu.ext.cub_scan", "xla.gpu.ext.cub_scan_unassigned_scratch_size")
def cub_scan(inst, args, ec):
    """Inclusive prefix sums along the operand's minor-most dimension (the rows CubScanOptions
    describes), in the operand's type; result (sums, u8 scratch)."""
    if len(args) != 1:
        _fail(inst, f"takes one operand, got {len(args)}")
    x = np.asarray(args[0])
    opts = CC.backend_attrs(inst)
    try:
        vec, row, col = (int(opts.get(k, d)) for k, d in (("vector_length", 1), ("row_length", -1),
                                                           ("column_length", 1)))
    except (TypeError, ValueError):
        _fail(inst, f"backend_config must be CubScanOptions (vector_length, row_length, column_length, kind, "
                    f"is_reverse), got {opts}")
    kind = opts.get("kind", "SUM")
    if kind not in ("SUM", 1):
        _fail(inst, f"backend_config kind must be SUM, got {kind!r}")
    if opts.get("is_reverse", False) is True:
        _fail(inst, "a reverse scan (is_reverse) is not supported by XLA GPU's CUB scan kernel")
    leaves = CC.leaf_shapes(inst.shape)
    if not inst.shape.is_tuple or len(leaves) != 2 or tuple(leaves[0].dims) != x.shape \
            or CC.np_dtype(leaves[0]) != x.dtype or CC.np_dtype(leaves[1]) != np.uint8:
        _fail(inst, f"returns ({_txt(x)}, u8[n] scratch), the declared shape is {inst.shape.to_str(False)}")
    lay = leaves[0].layout
    m2m = tuple(lay.minor_to_major) if lay is not None and len(lay.minor_to_major) == x.ndim \
        else tuple(range(x.ndim - 1, -1, -1))
    dim = m2m[0] if x.ndim else 0
    if x.ndim == 0 or vec != 1 or row != x.shape[dim] or row * col != x.size:
        _fail(inst, f"CubScanOptions (vector_length {vec}, row_length {row}, column_length {col}) must describe "
                    f"rows along the minor-most dimension of {_txt(x)}")
    with np.errstate(over="ignore"):
        y = np.cumsum(x, axis=dim, dtype=x.dtype)
    return (y, np.zeros(leaves[1].dims, np.uint8))
