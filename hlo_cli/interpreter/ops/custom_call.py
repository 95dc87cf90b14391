"""The custom-call rule and its registry of targets.

`custom-call` dispatches on `custom_call_target`: a target registered by exact name first, then
the family patterns (regular expressions, e.g. every `lapack_?potrf_ffi`) in registration order.
A handler is `fn(inst, args, ec) -> value` like an evaluation rule; register one with

    @target("Sharding")                          # exact names
    @target(pattern=r"lapack_[sdcz]potrf_ffi")   # or a family

An unknown target is an HloUnsupportedError (exit code 7: hlo cannot run it, the module is not wrong)
that says what the target is (custom_call_known.py).  A handler may declare `fn.refuses = check`,
`check(inst) -> reason | None`, for configurations it does not implement: `refusal(inst)` asks both,
and `hlo run` / `check` / `info` ask it before anything runs (hlo_cli/support.py).

Targets covered:

* sharding annotations (single device): `Sharding`, `SPMDFullToShardShape`,
  `SPMDShardToFullShape` (identities; a full-to-shard whose shapes differ takes this partition's
  tile), Shardy's `xla.sdy.FuncResultSharding` (identity), and the memory-space annotations
  `annotate_device_placement`, `MoveToHost`, `MoveToDevice` (identities);
* `TopK`, the after-optimization form of top_k: (values, s32 indices) of the k = result-width
  largest entries of the last dim.  XLA CPU's runtime kernel takes f32 only and sorts it in
  TOTALORDER (descending, ties by index) whatever the comparator says; XLA CPU rejects other types
  (a RET_CHECK), we sort them with the comparator.
* the CPU LAPACK kernels JAX emits (jaxlib), typed-FFI (`lapack_{s,d,c,z}<routine>_ffi`,
  api_version=API_VERSION_TYPED_FFI, options in the MLIR backend_config dict such as
  `{uplo = 76 : ui8}`) and the legacy ones (sizes and flags passed as leading scalar operands,
  workspace buffers as extra results).  FFI: potrf, trsm, getrf, geqrf, geqp3, orgqr/ungqr,
  syevd/heevd, gesdd, gesvd, geev, gees, gehrd, sytrd/hetrd, gtsv, ormqr/unmqr.  Legacy: potrf,
  blas_?trsm, getrf, geqrf, orgqr/ungqr, syevd/heevd, gesdd, geev.
* XLA CPU's own targets (expanders.py): SliceToDynamic, PadToStatic, SetBound, Qr /
  ProductOfElementaryHouseholderReflectors (QrExpander's algorithm) and Eigh (EighExpander's).

A target we do not run is refused with what it is (custom_call_known.py: a cuBLAS GEMM, a cuDNN
convolution, a Triton kernel, ...) and what we run.  Messages never repeat the instruction's
name: the evaluator adds it with the location.

Safety.  Before any LAPACK/BLAS routine runs, every operand and declared result is checked
against the sizes, element types and ranks the routine touches, and its option letters against
the ones LAPACK accepts (lapack_contract.py); a mismatch is an HloEvalError, so no module can make
LAPACK read or write outside its buffers or print its complaints.

LAPACK conventions.  jaxlib's kernels read matrices column-major ({0,1}, batch dims major) and
vectors row-major, whatever the module declares; XLA CPU lays a custom call's operands out as its
operand_layout_constraints say (row-major without them) and its results as declared.  A handler
computes on logical arrays in the kernel's order: lapack_contract.to_kernel / from_kernel
reinterpret the buffers of operands and results laid out otherwise, as XLA does (measured: a
row-major operand is factored as its transpose).  Outputs alias inputs the way LAPACK
overwrites them: potrf leaves the other triangle as it was and stops at the first non-positive
pivot (info = its 1-based column; the pivot slot holds the failed value), geqrf returns R above
and the Householder vectors below the diagonal with tau, getrf returns 1-based int32 pivots,
syevd returns eigenvalues ascending with the eigenvectors in the columns, gesdd returns
descending singular values with u and vt (mode 'A' full, 'S' reduced, 'N' values only: u and vt
are then zero here, uninitialized in XLA), geev returns complex eigenvectors unpacked from
LAPACK's real conjugate-pair form.  Buffers LAPACK leaves unspecified (gesdd's/syevd('N')'s
overwritten input, legacy workspaces) come back as LAPACK leaves them when LAPACK is available,
else as the input / zeros.

Which LAPACK.  XLA CPU calls the LAPACK that jaxlib loads through SciPy (OpenBLAS).  The results
of these factorizations are not unique (eigenvector and singular-vector signs, Householder
details), so to reproduce XLA exactly we call the same LAPACK routines, in the same precision, with
the same workspace sizes: NumPy's wheels bundle OpenBLAS (`numpy.libs/libscipy_openblas64_*`), whose
LAPACK symbols we call through ctypes: bit-identical to XLA on the same machine (OpenBLAS picks
its kernels by CPU; hlo_cli/SEMANTICS.md).  Where that library is not found (other NumPy builds), or with
HLO_LAPACK=numpy in the environment, we fall back to numpy.linalg, which computes single
precision in double: results then agree with XLA to rounding, and eigenvector / singular-vector
signs may differ (equally valid factorizations).
"""
from __future__ import annotations

import ctypes
import os
import re
from functools import lru_cache
from typing import Callable

import numpy as np

from ...errors import HloEvalError
from .. import computations as C
from ..parallel import bundled_openblas
from ..registry import evaluator
from ..values import np_dtype
from . import lapack_contract as LC

TARGETS: dict[str, Callable] = {}
PATTERNS: list[tuple[str, Callable]] = []     # (compiled on the first lookup: re's cache)


def target(*names: str, pattern: str | None = None):
    """Register a custom-call handler `fn(inst, args, ec)` for exact target names and/or a family
    regular expression (matched against the whole target name)."""
    from .. import custom_call_targets as table
    missing = [n for n in names if n not in table.NAMES] + \
        ([pattern] if pattern is not None and pattern not in table.PATTERNS else [])
    if missing:         # (the table answers `hlo check` without loading the handlers: keep it true)
        raise RuntimeError(f"custom-call target(s) {missing} registered without their entry in "
                           "hlo_cli/interpreter/custom_call_targets.py")

    def deco(fn):
        for n in names:
            if n in TARGETS:
                raise RuntimeError(f"two handlers for custom-call target {n}")
            TARGETS[n] = fn
        if pattern is not None:
            PATTERNS.append((pattern, fn))
        return fn
    return deco


def lookup(name: str) -> Callable | None:
    """The handler of a target: exact name first, then the family patterns."""
    fn = TARGETS.get(name)
    if fn is not None:
        return fn
    for pat, fn in PATTERNS:
        if re.fullmatch(pat, name):
            return fn
    return None


@evaluator("custom-call")
def eval_custom_call(inst, args, ec):
    """A call of the backend function `custom_call_target`; we run our registered implementation
    of it (see this module's docstring for the targets covered).  LAPACK/BLAS targets are first
    checked against their operand contract (lapack_contract.py) and see their operands laid out
    the way jaxlib's kernels read them."""
    name = inst.attrs.get("custom_call_target", "")
    fn = lookup(name)
    if fn is None:
        from ...errors import HloUnsupportedError
        from ..custom_call_known import advice, describe, unsupported_message
        raise HloUnsupportedError(unsupported_message(name, supported_summary()), hint=advice([(name, describe(name))]))
    if LC.parse_target(name) is None:
        return fn(inst, args, ec)
    c = LC.contract(inst, args, backend_attrs(inst))
    LC.check(inst, args, c)
    return LC.from_kernel(inst, fn(inst, LC.to_kernel(inst, args, c), ec), c)


def refusal(inst) -> str | None:
    """Why the custom call INST cannot run here, None when it can: its target is registered (exact
    name or family pattern) and its handler, when it declares a check `handler.refuses(inst) -> str |
    None` (a configuration it does not implement), does not refuse it.  What `hlo run` scans with
    before running (hlo_cli/support.py); never a hard-coded list of targets."""
    name = inst.attrs.get("custom_call_target", "") or ""
    fn = lookup(name)
    if fn is None:
        from ..custom_call_known import unsupported_message
        return unsupported_message(name, "see `hlo info MODULE`")
    check = getattr(fn, "refuses", None)
    return check(inst) if check is not None else None


def supported_summary() -> str:
    """What the interpreter runs, for messages."""
    return (", ".join(sorted(TARGETS)) + " and the LAPACK/BLAS kernels lapack_?<routine>_ffi (potrf, trsm, "
            "getrf, geqrf, geqp3, orgqr/ungqr, ormqr/unmqr, syevd/heevd, gesdd, gesvd, geev, gees, gehrd, sytrd/hetrd, "
            "gtsv) "
            "and their legacy forms, and jaxlib's GPU targets {cu,hip}solver_<routine>_ffi (potrf, getrf, geqrf, "
            "orgqr, ormqr, syevd, sytrd, gesvd, gesvdj, gesvdp, gesdd, syrk, csrlsvqr), {cu,hip}sparse_gtsv2_ffi, "
            "{cu,hip}_lu_pivots_to_permutation, {cu,hip}_threefry2x32[_ffi]")


# ============================================================================ helpers

def backend_attrs(inst) -> dict:
    """The backend_config of a typed-FFI custom call, an MLIR attribute dict such as
    `{mode = 86 : ui8, uplo = 76 : ui8}`, as {name: value} (ints, floats, bools, strings).
    A JSON backend_config is returned decoded; an empty or missing one as {}."""
    bc = inst.attrs.get("backend_config")
    if bc is None:
        return {}
    text = bc.string.strip() if hasattr(bc, "string") else str(bc).strip()
    if not text or text == "{}":
        return {}
    js = bc.json if hasattr(bc, "json") else None
    if isinstance(js, dict):
        return js
    return parse_mlir_dict(text)


# (a quoted value matched possessively: no backtracking state per character of a long string)
_MLIR_ENTRY = re.compile(r'\s*([A-Za-z_][\w.$]*)\s*=\s*("[^"\\]*+(?:\\.[^"\\]*+)*+"|[^,:}]+?)\s*(?::\s*([\w.]+))?\s*(?:,|$)')


def parse_mlir_dict(text: str) -> dict:
    """`{a = 76 : ui8, b = true, c = 1.5 : f32, d = "s"}` -> {"a": 76, "b": True, "c": 1.5, "d": "s"}."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out = {}
    pos = 0
    while pos < len(body):
        m = _MLIR_ENTRY.match(body, pos)
        if not m or m.end() == pos:
            raise HloEvalError(f"cannot read backend_config {text!r}")
        key, raw, _ = m.groups()
        raw = raw.strip()
        if raw.startswith('"'):
            val = bytes(raw[1:-1], "utf-8").decode("unicode_escape")
        elif raw in ("true", "false"):
            val = raw == "true"
        else:
            try:
                val = int(raw)
            except ValueError:
                try:
                    val = float(raw)
                except ValueError:
                    val = raw
        out[key] = val
        pos = m.end()
    return out


_char = LC.char          # a one-character option of backend_config ({uplo = 76 : ui8} -> 'L')


def leaf_shapes(shape):
    return list(shape.leaves()) if shape.is_tuple else [shape]


def declared_result(inst, outs):
    """Build the declared result from the computed leaves: each leaf converted to its declared dtype
    (and shape); leaves past the computed ones (workspaces) are zeros."""
    shapes = leaf_shapes(inst.shape)
    vals = []
    for k, s in enumerate(shapes):
        dt = np_dtype(s)
        if k < len(outs) and outs[k] is not None:
            v = np.asarray(outs[k])
            with np.errstate(all="ignore"):
                v = v.astype(dt) if v.dtype != dt else v
            v = v.reshape(s.dims)
            vals.append(v if v.flags.c_contiguous else v.copy())
        else:
            vals.append(np.zeros(s.dims, dt))
    return tuple(vals) if inst.shape.is_tuple else vals[0]


def _scalar(x) -> int:
    return int(np.asarray(x).reshape(-1)[0])


# ============================================================================ annotations

@target("Sharding", "annotate_device_placement", "MoveToHost", "MoveToDevice", "LayoutConstraint",
        "xla.sdy.FuncResultSharding")
def cc_identity(inst, args, ec):
    """Annotations that do not change values on one device: the operand itself (Shardy's
    FuncResultSharding only carries the sharding of an entry result for XLA's importer)."""
    return args[0] if len(args) == 1 else tuple(args)


@target("SPMDFullToShardShape")
def cc_full_to_shard(inst, args, ec):
    """Full array -> this partition's shard.  On one device the shapes agree and it is an identity;
    when they differ, the tile of partition ec.partition_id (tiles enumerated row-major)."""
    x = args[0]
    dims = tuple(inst.shape.dims)
    if tuple(x.shape) == dims:
        return x
    tiles = [f // s if s else 1 for f, s in zip(x.shape, dims)]
    idx = np.unravel_index(ec.partition_id % int(np.prod(tiles)), tiles)
    sl = tuple(slice(i * s, (i + 1) * s) for i, s in zip(idx, dims))
    return x[sl].copy()


@target("SPMDShardToFullShape")
def cc_shard_to_full(inst, args, ec):
    """A shard -> the full array; on one device an identity.  Rebuilding a full array from shards
    of several partitions needs the other partitions' values, which a single-device run does not
    have."""
    x = args[0]
    if tuple(x.shape) == tuple(inst.shape.dims):
        return x
    raise HloEvalError(f"SPMDShardToFullShape from {list(x.shape)} to {list(inst.shape.dims)} "
                       f"needs the shards of the other partitions; the interpreter runs one partition")


# ============================================================================ TopK

@target("TopK")
def cc_topk(inst, args, ec):
    """(values, s32 indices) of the k largest entries of the last dim, k = the result width.
    XLA CPU: f32 only, its runtime kernel (TOTALORDER descending, ties by index, the comparator not
    consulted); other types, which XLA CPU rejects, are sorted stably with the comparator."""
    x = np.asarray(args[0])
    leaves = leaf_shapes(inst.shape)
    if len(args) != 1 or x.ndim < 1 or len(leaves) != 2 or any(
            tuple(s.dims[:-1]) != x.shape[:-1] or not s.dims or s.dims[-1] > x.shape[-1] for s in leaves):
        raise HloEvalError(f"TopK takes one array and returns (values, indices) of its k largest entries along "
                           f"the last dim (k <= {x.shape[-1] if x.ndim else 0}, the other dims unchanged); got "
                           f"{len(args)} operand(s) of shape {list(x.shape)} and result {inst.shape.to_str(False)}")
    k = leaves[0].dims[-1]
    comps = inst.attrs.get("called_computations") or ()
    comp = inst.attrs.get("to_apply") or (comps[0] if comps else None)
    if x.dtype == np.float32 or comp is None:
        order = np.argsort(~C.total_order_key(x), axis=-1, kind="stable")[..., :k]
        vals = np.take_along_axis(x, order, -1)
    else:
        iota = np.broadcast_to(np.arange(x.shape[-1], dtype=np.int32), x.shape)
        vals, order = C.sort_arrays(ec, comp.name, [x, iota], x.ndim - 1, True)
        vals, order = vals[..., :k], order[..., :k]
    return declared_result(inst, [vals, order.astype(np.int32)])


# ============================================================================ LAPACK access

_PREFIX = {v: k for k, v in LC.TYPE_OF_LETTER.items()}
_REAL = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}


def _real_of(dt):
    return _REAL.get(np.dtype(dt), np.dtype(dt))


class _Lapack:
    """LAPACK/BLAS routines of NumPy's bundled OpenBLAS, called through ctypes (Fortran ABI:
    every argument by reference, hidden character lengths appended)."""

    def __init__(self, lib, prefix: str, suffix: str, int_dtype):
        self.lib = lib
        self.prefix = prefix
        self.suffix = suffix
        self.int = np.dtype(int_dtype)

    def fn(self, name: str):
        return getattr(self.lib, f"{self.prefix}{name}{self.suffix}")

    def call(self, name: str, *args):
        """Call routine `name`; args are ndarrays (passed by address; ints and chars must already
        be 1-element arrays) and str (a character argument)."""
        cargs, nchars, keep = [], 0, []
        for a in args:
            if isinstance(a, str):
                buf = np.frombuffer(a.encode()[:1], dtype=np.uint8).copy()
                keep.append(buf)
                cargs.append(ctypes.c_void_p(buf.ctypes.data))
                nchars += 1
            elif a is None:
                cargs.append(ctypes.c_void_p(0))
            else:
                cargs.append(ctypes.c_void_p(a.ctypes.data))
        cargs += [ctypes.c_size_t(1)] * nchars
        f = self.fn(name)
        f.restype = None
        f(*cargs)

    def i(self, v=0):
        return np.array([v], dtype=self.int)


@lru_cache(maxsize=1)
def lapack() -> _Lapack | None:
    """NumPy's bundled OpenBLAS (the same LAPACK jaxlib gets through SciPy), or None."""
    if os.environ.get("HLO_LAPACK", "").lower() == "numpy":
        return None
    cands = bundled_openblas()
    for path in cands:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, it in (("scipy_", "_64_", np.int64), ("scipy_", "_", np.int32),
                                   ("", "_64_", np.int64), ("", "_", np.int32)):
            try:
                getattr(lib, f"{prefix}dpotrf{suffix}")
                getattr(lib, f"{prefix}dgesdd{suffix}")
            except AttributeError:
                continue
            return _Lapack(lib, prefix, suffix, it)
    return None


def _f(x, dt):
    """A Fortran-ordered (column-major) writable copy of matrix x in dtype dt."""
    return np.array(x, dtype=dt, order="F", copy=True)


def _flat(x, k: int):
    """x with its batch dims (all but the last k) merged into one, empty batches included."""
    return x.reshape((int(np.prod(x.shape[:-k], dtype=np.int64)),) + x.shape[x.ndim - k:])


def _batched(a):
    """(batch shape, list of 2-D matrices)."""
    a = np.asarray(a)
    bshape = a.shape[:-2]
    flat = _flat(a, 2)
    return bshape, flat


def _matrices(a):
    """(dtype, batch shape, matrices, m, n, min(m, n)) of a batched m x n matrix operand."""
    bshape, mats = _batched(a)
    m, n = a.shape[-2:]
    return a.dtype, bshape, mats, m, n, min(m, n)


def _query(lp: _Lapack, name, dt, *args_before_work, after=()):
    """LAPACK workspace query: the routine called with lwork = -1; returns the optimal lwork."""
    work = np.zeros(1, dt)
    info = lp.i()
    lp.call(name, *args_before_work, work, lp.i(-1), *after, info)
    return max(1, int(np.real(work[0])))


# ---------------------------------------------------------------------------- routines
# Each takes logical arrays (..., m, n) of the routine's dtype and loops over the batch.

def potrf(a, lower: bool):
    """Cholesky of each matrix's `lower`/upper triangle; (factor, info).  The other triangle is left
    as it was; on failure LAPACK stops at the failing column."""
    dt = a.dtype
    bshape, mats = _batched(a)
    n = a.shape[-1]
    lp = lapack()
    outs, infos = [], []
    for m in mats:
        if lp is not None:
            x = _f(m, dt)
            info = lp.i()
            lp.call(_PREFIX[dt] + "potrf", "L" if lower else "U", lp.i(n), x, lp.i(max(n, 1)), info)
            outs.append(np.asarray(x))
            infos.append(int(info[0]))
        else:
            x, info = _potf2(m, lower)
            outs.append(x)
            infos.append(info)
    return (np.array(outs, dt).reshape(a.shape), np.array(infos, np.int32).reshape(bshape))


def _potf2(m, lower):
    """LAPACK's unblocked left-looking Cholesky (xPOTF2) in double precision."""
    dt = m.dtype
    w = m.astype(np.complex128 if dt.kind == "c" else np.float64)
    if not lower:
        w = np.conj(w.T)
    n = w.shape[0]
    info = 0
    with np.errstate(all="ignore"):
        for j in range(n):
            ajj = (w[j, j] - np.vdot(w[j, :j], w[j, :j])).real
            if not ajj > 0:
                w[j, j] = ajj
                info = j + 1
                break
            ajj = np.sqrt(ajj)
            w[j, j] = ajj
            if j + 1 < n:
                w[j + 1:, j] = (w[j + 1:, j] - w[j + 1:, :j] @ np.conj(w[j, :j])) / ajj
    res = m.copy()
    tri = np.tril(np.ones((n, n), bool))
    if info:
        done = np.zeros((n, n), bool)
        done[:, :info] = True
        tri &= done
    val = w if lower else np.conj(w.T)
    mask = tri if lower else tri.T
    res[mask] = val[mask].astype(dt)
    return res, info


def trsm(a, b, side: str, uplo: str, trans: str, diag: str, alpha=None):
    """Solve op(a) x = alpha b (side 'L') or x op(a) = alpha b (side 'R'); BLAS xTRSM."""
    dt = b.dtype
    al = np.array([1 if alpha is None else np.asarray(alpha).reshape(-1)[0]], dt)
    _, amats = _batched(a)
    bshape, bmats = _batched(b)
    m, n = b.shape[-2:]
    lp = lapack()
    outs = []
    for am, bm in zip(amats, bmats):
        if lp is not None:
            x = _f(bm, dt)
            lda = m if side == "L" else n
            lp.call(_PREFIX[dt] + "trsm", side, uplo, trans, diag, lp.i(m), lp.i(n), al,
                    _f(am, dt), lp.i(max(lda, 1)), x, lp.i(max(m, 1)))
            outs.append(np.asarray(x))
        else:
            outs.append(_subst(am, bm * al[0], side == "L", uplo == "L", diag == "U", trans).astype(dt))
    return np.array(outs, dt).reshape(b.shape)


def _subst(a, b, left, lower, unit, trans):
    """Plain substitution in double precision (the fallback of trsm)."""
    w = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    rhs = b.astype(w.dtype if b.dtype.kind != "c" else np.complex128)
    k = w.shape[0]
    t = np.tril(w) if lower else np.triu(w)
    if unit:
        np.fill_diagonal(t, 1)
    if trans != "N":
        t = t.T
        lower = not lower
        if trans == "C":
            t = np.conj(t)
    if not left:
        t, rhs, lower = t.T, rhs.T, not lower
    x = np.zeros_like(rhs, dtype=np.result_type(t, rhs))
    order = range(k) if lower else range(k - 1, -1, -1)
    with np.errstate(all="ignore"):
        for i in order:
            s = t[i, :i] @ x[:i] if lower else t[i, i + 1:] @ x[i + 1:]
            x[i] = (rhs[i] - s) / t[i, i]
    return x if left else x.T


def getrf(a):
    """LU with partial pivoting: (lu, 1-based int32 pivots, info)."""
    dt, bshape, mats, m, n, k = _matrices(a)
    lp = lapack()
    outs, pivs, infos = [], [], []
    for mat in mats:
        if lp is not None:
            x = _f(mat, dt)
            ipiv = np.zeros(max(k, 1), lp.int)
            info = lp.i()
            lp.call(_PREFIX[dt] + "getrf", lp.i(m), lp.i(n), x, lp.i(max(m, 1)), ipiv, info)
            outs.append(np.asarray(x))
            pivs.append(ipiv[:k])
            infos.append(int(info[0]))
        else:
            x, p, info = _getf2(mat)
            outs.append(x)
            pivs.append(p)
            infos.append(info)
    return (np.array(outs, dt).reshape(a.shape), np.array(pivs, np.int32).reshape(bshape + (k,)),
            np.array(infos, np.int32).reshape(bshape))


def _getf2(mat):
    """Unblocked LU with partial pivoting (first maximum of |re| + |im|, like IxAMAX)."""
    dt = mat.dtype
    w = mat.astype(np.complex128 if dt.kind == "c" else np.float64).copy()
    m, n = w.shape
    k = min(m, n)
    piv = np.zeros(k, np.int32)
    info = 0
    with np.errstate(all="ignore"):
        for j in range(k):
            col = w[j:, j]
            mag = np.abs(col.real) + np.abs(col.imag) if dt.kind == "c" else np.abs(col)
            p = j + int(np.argmax(mag)) if mag.size else j
            piv[j] = p + 1
            if w[p, j] != 0:
                if p != j:
                    w[[j, p]] = w[[p, j]]
                w[j + 1:, j] /= w[j, j]
            elif info == 0:
                info = j + 1
            w[j + 1:, j + 1:] -= np.outer(w[j + 1:, j], w[j, j + 1:])
    return w.astype(dt), piv, info


def geqrf(a):
    """Householder QR: (R above / reflectors below the diagonal, tau)."""
    dt, bshape, mats, m, n, k = _matrices(a)
    lp = lapack()
    outs, taus = [], []
    for mat in mats:
        if lp is not None:
            name = _PREFIX[dt] + "geqrf"
            lwork = _query(lp, name, dt, lp.i(m), lp.i(n), None, lp.i(max(m, 1)), None)
            x = _f(mat, dt)
            tau = np.zeros(max(k, 1), dt)
            lp.call(name, lp.i(m), lp.i(n), x, lp.i(max(m, 1)), tau, np.zeros(lwork, dt), lp.i(lwork), lp.i())
            outs.append(np.asarray(x))
            taus.append(tau[:k])
        else:
            wide = np.complex128 if dt.kind == "c" else np.float64
            h, tau = np.linalg.qr(mat.astype(wide), mode="raw")
            outs.append(h.T.astype(dt))
            taus.append(tau.astype(dt)[:k])
    return np.array(outs, dt).reshape(a.shape), np.array(taus, dt).reshape(bshape + (k,))


def geqp3(a, jpvt):
    """QR with column pivoting: (a, jpvt (1-based, in/out), tau).  Needs LAPACK."""
    dt = a.dtype
    lp = lapack()
    if lp is None:
        raise HloEvalError("geqp3 (QR with column pivoting) needs NumPy's bundled LAPACK, which was not found")
    bshape, mats = _batched(a)
    _, pmats = _batched(np.asarray(jpvt)[..., None, :])
    m, n = a.shape[-2:]
    k = min(m, n)
    name = _PREFIX[dt] + "geqp3"
    cplx = dt.kind == "c"
    outs, pvs, taus = [], [], []
    for mat, pv in zip(mats, pmats):
        x = _f(mat, dt)
        p = np.array(pv.reshape(-1), lp.int)
        tau = np.zeros(max(k, 1), dt)
        rw = (np.zeros(max(2 * n, 1), _real_of(dt)),) if cplx else ()
        lwork = _query(lp, name, dt, lp.i(m), lp.i(n), x, lp.i(max(m, 1)), p, tau, after=rw)
        if m == 0:      # LAPACK's own query then undersizes the xORMQR of the fixed columns (which prints)
            lwork = max(lwork, 3 * n + 1)
        lp.call(name, lp.i(m), lp.i(n), x, lp.i(max(m, 1)), p, tau, np.zeros(lwork, dt), lp.i(lwork), *rw, lp.i())
        outs.append(np.asarray(x))
        pvs.append(p)
        taus.append(tau[:k])
    return (np.array(outs, dt).reshape(a.shape), np.array(pvs, np.int32).reshape(bshape + (n,)),
            np.array(taus, dt).reshape(bshape + (k,)))


def orgqr(a, tau):
    """The first n columns of Q = H(1) ... H(k) from geqrf's reflectors (xORGQR / xUNGQR)."""
    dt = a.dtype
    bshape, mats = _batched(a)
    taus = _flat(np.asarray(tau), 1)
    m, n = a.shape[-2:]
    k = taus.shape[-1]
    lp = lapack()
    outs = []
    name = _PREFIX[dt] + ("ungqr" if dt.kind == "c" else "orgqr")
    for mat, t in zip(mats, taus):
        if lp is not None:
            lwork = _query(lp, name, dt, lp.i(m), lp.i(n), lp.i(k), None, lp.i(max(m, 1)), None)
            x = _f(mat, dt)
            lp.call(name, lp.i(m), lp.i(n), lp.i(k), x, lp.i(max(m, 1)), np.array(t, dt),
                    np.zeros(lwork, dt), lp.i(lwork), lp.i())
            outs.append(np.asarray(x))
        else:
            outs.append(_householder_product(mat, t).astype(dt))
    return np.array(outs, dt).reshape(a.shape)


def _householder_product(mat, tau):
    wide = np.complex128 if mat.dtype.kind == "c" else np.float64
    v = mat.astype(wide)
    m, n = v.shape
    q = np.eye(m, n, dtype=wide)
    for j in range(len(tau) - 1, -1, -1):
        h = np.zeros(m, wide)
        h[j] = 1
        h[j + 1:] = v[j + 1:, j]
        q[j:] -= tau[j] * np.outer(h[j:], np.conj(h[j:]) @ q[j:])
    return q


def syevd(a, jobz: str, uplo: str):
    """Symmetric / Hermitian eigendecomposition (xSYEVD / xHEEVD): (vectors in columns, eigenvalues
    ascending, info), with jaxlib's workspace sizes (the LAPACK documentation's minimums)."""
    dt = a.dtype
    rdt = _real_of(dt)
    bshape, mats = _batched(a)
    n = a.shape[-1]
    lp = lapack()
    cplx = dt.kind == "c"
    vs, ws, infos = [], [], []
    for mat in mats:
        if lp is not None:
            x = _f(mat, dt)
            w = np.zeros(max(n, 1), rdt)
            info = lp.i()
            if jobz == "V":
                lwork, lrwork, liwork = ((2 * n + n * n, 1 + 5 * n + 2 * n * n, 3 + 5 * n) if cplx
                                         else (1 + 6 * n + 2 * n * n, 0, 3 + 5 * n))
            else:
                lwork, lrwork, liwork = (n + 1, max(n, 1), 1) if cplx else (2 * n + 1, 0, 1)
            # LAPACK's minimum is 1 (jaxlib's formulas give 0 for an empty complex matrix)
            lwork, liwork = max(lwork, 1), max(liwork, 1)
            lrwork = max(lrwork, 1) if cplx else lrwork
            work = np.zeros(max(lwork, 1), dt)
            iwork = np.zeros(max(liwork, 1), lp.int)
            if cplx:
                lp.call(_PREFIX[dt] + "heevd", jobz, uplo, lp.i(n), x, lp.i(max(n, 1)), w, work, lp.i(lwork),
                        np.zeros(max(lrwork, 1), rdt), lp.i(lrwork), iwork, lp.i(liwork), info)
            else:
                lp.call(_PREFIX[dt] + "syevd", jobz, uplo, lp.i(n), x, lp.i(max(n, 1)), w, work, lp.i(lwork),
                        iwork, lp.i(liwork), info)
            vs.append(np.asarray(x) if jobz == "V" else np.asarray(x))
            ws.append(w[:n])
            infos.append(int(info[0]))
        else:
            wide = np.complex128 if cplx else np.float64
            try:
                w, v = np.linalg.eigh(mat.astype(wide), UPLO=uplo)
                info = 0
            except np.linalg.LinAlgError:
                w, v, info = np.full(n, np.nan), np.full((n, n), np.nan), 1
            vs.append((v if jobz == "V" else mat).astype(dt))
            ws.append(w.astype(rdt))
            infos.append(info)
    return (np.array(vs, dt).reshape(a.shape), np.array(ws, rdt).reshape(bshape + (n,)),
            np.array(infos, np.int32).reshape(bshape))


def _svd_shapes(m, n, mode):
    k = min(m, n)
    if mode == "A":
        return (m, m), (n, n)
    if mode == "S":
        return (m, k), (k, n)
    return (m, m), (n, n)


def gesvd_family(a, mode: str, routine: str, u_shape=None, vt_shape=None):
    """SVD by xGESDD (divide and conquer) or xGESVD: (a as LAPACK leaves it, singular values
    descending, u, vt, info); mode 'A' (full), 'S' (reduced) or 'N' (values only)."""
    dt = a.dtype
    rdt = _real_of(dt)
    bshape, mats = _batched(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    us, vts = _svd_shapes(m, n, mode)
    us, vts = tuple(u_shape or us), tuple(vt_shape or vts)
    lp = lapack()
    cplx = dt.kind == "c"
    name = _PREFIX[dt] + routine
    a_out, s_out, u_out, vt_out, infos = [], [], [], [], []
    for mat in mats:
        if lp is not None:
            x = _f(mat, dt)
            s = np.zeros(max(k, 1), rdt)
            u = np.zeros(us, dt, order="F")
            vt = np.zeros(vts, dt, order="F")
            ldu, ldvt = max(m, 1), max(vts[0], 1)
            info = lp.i()
            if routine == "gesdd":
                iwork = np.zeros(max(8 * k, 1), lp.int)
                if cplx:
                    mx = max(m, n)
                    lrw = 7 * k if mode == "N" else max(5 * k * k + 5 * k, 2 * mx * k + 2 * k * k + k)
                    rw = (np.zeros(max(lrw, 1), rdt),)
                else:
                    rw = ()
                lwork = _query(lp, name, dt, mode, lp.i(m), lp.i(n), None, lp.i(max(m, 1)), None, None,
                               lp.i(ldu), None, lp.i(ldvt), after=rw + (iwork,))
                lp.call(name, mode, lp.i(m), lp.i(n), x, lp.i(max(m, 1)), s, u, lp.i(ldu), vt, lp.i(ldvt),
                        np.zeros(lwork, dt), lp.i(lwork), *rw, iwork, info)
            else:
                rw = (np.zeros(max(5 * k, 1), rdt),) if cplx else ()
                lwork = _query(lp, name, dt, mode, mode, lp.i(m), lp.i(n), None, lp.i(max(m, 1)), None, None,
                               lp.i(ldu), None, lp.i(ldvt), after=rw)
                lp.call(name, mode, mode, lp.i(m), lp.i(n), x, lp.i(max(m, 1)), s, u, lp.i(ldu), vt,
                        lp.i(ldvt), np.zeros(lwork, dt), lp.i(lwork), *rw, info)
            a_out.append(np.asarray(x))
            s_out.append(s[:k])
            u_out.append(np.asarray(u))
            vt_out.append(np.asarray(vt))
            infos.append(int(info[0]))
        else:
            wide = np.complex128 if cplx else np.float64
            uu = np.zeros(us, dt)
            vv = np.zeros(vts, dt)
            try:
                if mode == "N":
                    s = np.linalg.svd(mat.astype(wide), compute_uv=False)
                else:
                    u_, s, vt_ = np.linalg.svd(mat.astype(wide), full_matrices=(mode == "A"))
                    uu, vv = u_.astype(dt), vt_.astype(dt)
                info = 0
            except np.linalg.LinAlgError:
                s, info = np.full(k, np.nan), 1
            a_out.append(mat)
            s_out.append(s.astype(rdt))
            u_out.append(uu)
            vt_out.append(vv)
            infos.append(info)
    return (np.array(a_out, dt).reshape(a.shape), np.array(s_out, rdt).reshape(bshape + (k,)),
            np.array(u_out, dt).reshape(bshape + us), np.array(vt_out, dt).reshape(bshape + vts),
            np.array(infos, np.int32).reshape(bshape))


def _unpack_pairs(wi, packed):
    """LAPACK's real eigenvector storage -> complex vectors: a conjugate pair (wi[j] != 0) is
    stored as real part in column j and imaginary part in column j + 1."""
    n = packed.shape[0]
    out = packed.astype(np.result_type(packed.dtype, np.complex64))
    j = 0
    while j < n:
        if wi[j] == 0 or np.isnan(wi[j]) or j + 1 >= n:
            j += 1
            continue
        re, im = packed[:, j], packed[:, j + 1]
        out[:, j] = re + 1j * im
        out[:, j + 1] = re - 1j * im
        j += 2
    return out


def geev(a, jobvl: str, jobvr: str):
    """General eigendecomposition (xGEEV).  Real input: (wr, wi, vl, vr, info) with complex
    eigenvectors; complex: (w, vl, vr, info).  Like jaxlib, a matrix with a non-finite entry is not
    factored (info = -4; we return NaN)."""
    dt = a.dtype
    rdt = _real_of(dt)
    cdt = np.result_type(dt, np.complex64)
    bshape, mats = _batched(a)
    n = a.shape[-1]
    lp = lapack()
    cplx = dt.kind == "c"
    name = _PREFIX[dt] + "geev"
    W, VL, VR, INFO = [], [], [], []
    for mat in mats:
        vl = np.full((n, n), np.nan, cdt)
        vr = np.full((n, n), np.nan, cdt)
        w = np.full(n, np.nan, cdt)
        if not np.isfinite(mat).all():
            info = -4
        elif lp is not None:
            x = _f(mat, dt)
            info_a = lp.i()
            nn = lp.i(max(n, 1))
            if cplx:
                wv = np.zeros(max(n, 1), dt)
                vlw = np.zeros((n, n), dt, order="F")
                vrw = np.zeros((n, n), dt, order="F")
                rw = np.zeros(max(2 * n, 1), rdt)
                lwork = _query(lp, name, dt, jobvl, jobvr, lp.i(n), x, nn, wv, vlw, nn, vrw, nn, after=(rw,))
                lp.call(name, jobvl, jobvr, lp.i(n), x, nn, wv, vlw, nn, vrw, nn, np.zeros(lwork, dt),
                        lp.i(lwork), rw, info_a)
                info = int(info_a[0])
                if info == 0:
                    w, vl, vr = wv[:n], np.asarray(vlw), np.asarray(vrw)
            else:
                wr = np.zeros(max(n, 1), dt)
                wi = np.zeros(max(n, 1), dt)
                vlw = np.zeros((n, n), dt, order="F")
                vrw = np.zeros((n, n), dt, order="F")
                lwork = _query(lp, name, dt, jobvl, jobvr, lp.i(n), x, nn, wr, wi, vlw, nn, vrw, nn)
                lp.call(name, jobvl, jobvr, lp.i(n), x, nn, wr, wi, vlw, nn, vrw, nn, np.zeros(lwork, dt),
                        lp.i(lwork), info_a)
                info = int(info_a[0])
                if info == 0:
                    w = (wr[:n] + 1j * wi[:n]).astype(cdt)
                    vl = _unpack_pairs(wi[:n], np.asarray(vlw)).astype(cdt)
                    vr = _unpack_pairs(wi[:n], np.asarray(vrw)).astype(cdt)
        else:
            wide = np.complex128
            ev, vecs = np.linalg.eig(mat.astype(np.complex128 if cplx else np.float64))
            w = ev.astype(cdt)
            vr = vecs.astype(cdt)
            with np.errstate(all="ignore"):
                left = np.conj(np.linalg.inv(vecs.astype(wide))).T
                left = left / np.linalg.norm(left, axis=0, keepdims=True)
                big = np.argmax(np.abs(left), axis=0)
                ph = left[big, np.arange(n)]
                left = left * (np.conj(ph) / np.abs(ph))
            vl = left.astype(cdt)
            info = 0
        W.append(w)
        VL.append(vl if jobvl == "V" else np.zeros((n, n), cdt))
        VR.append(vr if jobvr == "V" else np.zeros((n, n), cdt))
        INFO.append(info)
    W = np.array(W, cdt).reshape(bshape + (n,))
    res = [np.array(VL, cdt).reshape(a.shape), np.array(VR, cdt).reshape(a.shape),
           np.array(INFO, np.int32).reshape(bshape)]
    if cplx:
        return [W] + res
    return [W.real.astype(rdt), W.imag.astype(rdt)] + res


def _need_lapack(what):
    lp = lapack()
    if lp is None:
        raise HloEvalError(f"{what} needs NumPy's bundled LAPACK (OpenBLAS), which was not found")
    return lp


def gees(a, jobvs: str):
    """Schur decomposition (xGEES, no eigenvalue sorting): real (t, vs, wr, wi, sdim, info),
    complex (t, vs, w, sdim, info).  Needs LAPACK."""
    lp = _need_lapack("gees (Schur decomposition)")
    dt = a.dtype
    rdt = _real_of(dt)
    bshape, mats = _batched(a)
    n = a.shape[-1]
    cplx = dt.kind == "c"
    name = _PREFIX[dt] + "gees"
    T, VS, W1, W2, SD, INFO = [], [], [], [], [], []
    nn = lp.i(max(n, 1))
    for mat in mats:
        x = _f(mat, dt)
        vs = np.zeros((n, n), dt, order="F")
        sdim, info = lp.i(), lp.i()
        if cplx:
            w = np.zeros(max(n, 1), dt)
            rw = np.zeros(max(n, 1), rdt)
            lwork = _query(lp, name, dt, jobvs, "N", None, lp.i(n), None, nn, None, None, None, nn,
                           after=(None, None))
            lp.call(name, jobvs, "N", None, lp.i(n), x, nn, sdim, w, vs, nn, np.zeros(lwork, dt), lp.i(lwork),
                    rw, None, info)
            W1.append(w[:n])
        else:
            wr, wi = np.zeros(max(n, 1), dt), np.zeros(max(n, 1), dt)
            lwork = _query(lp, name, dt, jobvs, "N", None, lp.i(n), None, nn, None, None, None, None, nn,
                           after=(None,))
            lp.call(name, jobvs, "N", None, lp.i(n), x, nn, sdim, wr, wi, vs, nn, np.zeros(lwork, dt),
                    lp.i(lwork), None, info)
            W1.append(wr[:n])
            W2.append(wi[:n])
        T.append(np.asarray(x))
        VS.append(np.asarray(vs))
        SD.append(int(sdim[0]))
        INFO.append(int(info[0]))
    out = [np.array(T, dt).reshape(a.shape), np.array(VS, dt).reshape(a.shape),
           np.array(W1, dt).reshape(bshape + (n,))]
    if not cplx:
        out.append(np.array(W2, dt).reshape(bshape + (n,)))
    return out + [np.array(SD, np.int32).reshape(bshape), np.array(INFO, np.int32).reshape(bshape)]


def gehrd(a, low: int, high: int):
    """Reduction to upper Hessenberg form (xGEHRD): (a, tau, info).  Needs LAPACK."""
    lp = _need_lapack("gehrd (Hessenberg reduction)")
    dt = a.dtype
    bshape, mats = _batched(a)
    n = a.shape[-1]
    name = _PREFIX[dt] + "gehrd"
    nn = lp.i(max(n, 1))
    X, TAU, INFO = [], [], []
    for mat in mats:
        lwork = _query(lp, name, dt, lp.i(n), lp.i(low), lp.i(high), None, nn, None)
        x = _f(mat, dt)
        tau = np.zeros(max(n - 1, 1), dt)
        info = lp.i()
        lp.call(name, lp.i(n), lp.i(low), lp.i(high), x, nn, tau, np.zeros(lwork, dt), lp.i(lwork), info)
        X.append(np.asarray(x))
        TAU.append(tau[:max(n - 1, 0)])
        INFO.append(int(info[0]))
    return [np.array(X, dt).reshape(a.shape), np.array(TAU, dt).reshape(bshape + (max(n - 1, 0),)),
            np.array(INFO, np.int32).reshape(bshape)]


def sytrd(a, uplo: str):
    """Reduction of a symmetric / Hermitian matrix to tridiagonal form (xSYTRD / xHETRD):
    (a, d, e, tau, info).  Needs LAPACK."""
    lp = _need_lapack("sytrd (tridiagonal reduction)")
    dt = a.dtype
    rdt = _real_of(dt)
    bshape, mats = _batched(a)
    n = a.shape[-1]
    name = _PREFIX[dt] + ("hetrd" if dt.kind == "c" else "sytrd")
    nn = lp.i(max(n, 1))
    X, D, E, TAU, INFO = [], [], [], [], []
    m1 = max(n - 1, 0)
    for mat in mats:
        lwork = _query(lp, name, dt, "L", lp.i(n), None, nn, None, None, None)
        x = _f(mat, dt)
        d, e, tau = np.zeros(max(n, 1), rdt), np.zeros(max(m1, 1), rdt), np.zeros(max(m1, 1), dt)
        info = lp.i()
        lp.call(name, uplo, lp.i(n), x, nn, d, e, tau, np.zeros(lwork, dt), lp.i(lwork), info)
        X.append(np.asarray(x))
        D.append(d[:n])
        E.append(e[:m1])
        TAU.append(tau[:m1])
        INFO.append(int(info[0]))
    return [np.array(X, dt).reshape(a.shape), np.array(D, rdt).reshape(bshape + (n,)),
            np.array(E, rdt).reshape(bshape + (m1,)), np.array(TAU, dt).reshape(bshape + (m1,)),
            np.array(INFO, np.int32).reshape(bshape)]


def gtsv(dl, d, du, b):
    """Tridiagonal solve (xGTSV) with JAX's length-n diagonals (dl[0] and du[n-1] unused):
    (dl, d, du as LAPACK leaves them, the solution, info).  Needs LAPACK."""
    lp = _need_lapack("gtsv (tridiagonal solve)")
    dt = b.dtype
    n, nrhs = b.shape[-2:]
    bshape = b.shape[:-2]
    flat = lambda v, k: _flat(np.asarray(v, dt), k)   # noqa: E731
    DL, DD, DU, X, INFO = [], [], [], [], []
    for l_, d_, u_, b_ in zip(flat(dl, 1), flat(d, 1), flat(du, 1), flat(b, 2)):
        l_, d_, u_ = l_.copy(), d_.copy(), u_.copy()
        x = _f(b_, dt)
        info = lp.i()
        if n:
            lp.call(_PREFIX[dt] + "gtsv", lp.i(n), lp.i(nrhs), l_[1:], d_, u_, x, lp.i(max(n, 1)), info)
        DL.append(l_)
        DD.append(d_)
        DU.append(u_)
        X.append(np.asarray(x))
        INFO.append(int(info[0]))
    return [np.array(DL, dt).reshape(bshape + (n,)), np.array(DD, dt).reshape(bshape + (n,)),
            np.array(DU, dt).reshape(bshape + (n,)), np.array(X, dt).reshape(b.shape),
            np.array(INFO, np.int32).reshape(bshape)]


def ormqr(a, tau, c, left: bool, transpose: bool):
    """op(Q) c (left) or c op(Q) (right), Q = H(1) ... H(k) from geqrf's reflectors (xORMQR /
    xUNMQR; op is the (conjugate) transpose when `transpose`)."""
    dt = c.dtype
    cplx = dt.kind == "c"
    side, trans = "L" if left else "R", ("C" if cplx else "T") if transpose else "N"
    m, n = c.shape[-2:]
    r, ka = a.shape[-2:]
    k = tau.shape[-1]
    bshape, cmats = _batched(c)
    _, amats = _batched(a)
    taus = _flat(np.asarray(tau), 1)
    lp = lapack()
    name = _PREFIX[dt] + ("unmqr" if cplx else "ormqr")
    outs = []
    for am, t, cm in zip(amats, taus, cmats):
        if lp is not None:
            x = _f(cm, dt)
            aa = _f(am, dt)
            lda = lp.i(max(r, 1))
            lwork = _query(lp, name, dt, side, trans, lp.i(m), lp.i(n), lp.i(k), None, lda, None, None,
                           lp.i(max(m, 1)))
            if m and n:
                lp.call(name, side, trans, lp.i(m), lp.i(n), lp.i(k), aa, lda, np.array(t, dt), x,
                        lp.i(max(m, 1)), np.zeros(lwork, dt), lp.i(lwork), lp.i())
            outs.append(np.asarray(x))
        else:
            full = np.zeros((r, r), dt)
            full[:, :min(ka, r)] = am[:, :min(ka, r)]
            q = _householder_product(full, t)
            if transpose:
                q = np.conj(q.T)
            wide = cm.astype(q.dtype)
            outs.append((q @ wide if left else wide @ q).astype(dt))
    return np.array(outs, dt).reshape(c.shape)


# ============================================================================ LAPACK targets

def _prefix_dtype(inst, default):
    """The LAPACK dtype of a target (its s/d/c/z letter), falling back to the operand's."""
    m = re.match(r"(?:lapack|blas)_([sdcz])", inst.attrs.get("custom_call_target", ""))
    return LC.TYPE_OF_LETTER[m.group(1)] if m else np.dtype(default)


@target(pattern=r"lapack_[sdcz]potrf_ffi")
def cc_potrf_ffi(inst, args, ec):
    """xPOTRF(uplo): (factor in the uplo triangle, other triangle unchanged; s32 info per matrix)."""
    at = backend_attrs(inst)
    a = np.asarray(args[0])
    return declared_result(inst, potrf(a.astype(_prefix_dtype(inst, a.dtype)), _char(at, "uplo", "L") == "L"))


@target(pattern=r"lapack_[sdcz]potrf")
def cc_potrf_legacy(inst, args, ec):
    """Legacy xPOTRF(lower, batch, n, a) -> (a, info)."""
    a = np.asarray(args[-1])
    return declared_result(inst, potrf(a.astype(_prefix_dtype(inst, a.dtype)), bool(_scalar(args[0]))))


@target(pattern=r"lapack_[sdcz]trsm_ffi")
def cc_trsm_ffi(inst, args, ec):
    """xTRSM(a, b[, alpha]) with side/uplo/trans_x/diag: x with op(a) x = alpha b or x op(a) = alpha b."""
    at = backend_attrs(inst)
    a, b = np.asarray(args[0]), np.asarray(args[1])
    dt = _prefix_dtype(inst, b.dtype)
    alpha = args[2] if len(args) > 2 else None
    return declared_result(inst, [trsm(a.astype(dt), b.astype(dt), _char(at, "side", "L"), _char(at, "uplo", "L"),
                                       _char(at, "trans_x", "N"), _char(at, "diag", "N"), alpha)])


@target(pattern=r"blas_[sdcz]trsm")
def cc_trsm_legacy(inst, args, ec):
    """Legacy blas_?trsm(left_side, lower, trans_a (0 N, 1 T, 2 C), unit_diag, m, n, batch, alpha, a, b)."""
    a, b = np.asarray(args[-2]), np.asarray(args[-1])
    dt = _prefix_dtype(inst, b.dtype)
    flags = [_scalar(v) for v in args[:4]]
    return declared_result(inst, [trsm(a.astype(dt), b.astype(dt), "L" if flags[0] else "R", "L" if flags[1] else "U",
                                       "NTC"[flags[2]], "U" if flags[3] else "N", args[-3])])


@target(pattern=r"lapack_[sdcz]getrf(_ffi)?")
def cc_getrf(inst, args, ec):
    """xGETRF: (lu, s32 1-based pivots, info); the legacy form passes (batch, m, n, a)."""
    a = np.asarray(args[-1])
    return declared_result(inst, getrf(a.astype(_prefix_dtype(inst, a.dtype))))


@target(pattern=r"lapack_[sdcz]geqrf_ffi")
def cc_geqrf_ffi(inst, args, ec):
    """xGEQRF: (R and the Householder reflectors, tau)."""
    a = np.asarray(args[0])
    return declared_result(inst, geqrf(a.astype(_prefix_dtype(inst, a.dtype))))


@target(pattern=r"lapack_[sdcz]geqrf")
def cc_geqrf_legacy(inst, args, ec):
    """Legacy xGEQRF(batch, m, n, lwork, a) -> (a, tau, info, workspace)."""
    a = np.asarray(args[-1])
    q, tau = geqrf(a.astype(_prefix_dtype(inst, a.dtype)))
    return declared_result(inst, [q, tau, np.zeros(a.shape[:-2], np.int32)])


@target(pattern=r"lapack_[sdcz]geqp3_ffi")
def cc_geqp3_ffi(inst, args, ec):
    """xGEQP3(a, jpvt): QR with column pivoting -> (a, jpvt, tau)."""
    a = np.asarray(args[0])
    return declared_result(inst, geqp3(a.astype(_prefix_dtype(inst, a.dtype)), np.asarray(args[1])))


@target(pattern=r"lapack_(?:[sd]orgqr|[cz]ungqr)_ffi")
def cc_orgqr_ffi(inst, args, ec):
    """xORGQR / xUNGQR(a, tau): the Householder product Q."""
    a = np.asarray(args[0])
    dt = _prefix_dtype(inst, a.dtype)
    return declared_result(inst, [orgqr(a.astype(dt), np.asarray(args[1]).astype(dt))])


@target(pattern=r"lapack_(?:[sd]orgqr|[cz]ungqr)")
def cc_orgqr_legacy(inst, args, ec):
    """Legacy xORGQR(batch, m, n, k, lwork, a, tau) -> (a, info, workspace)."""
    a = np.asarray(args[-2])
    dt = _prefix_dtype(inst, a.dtype)
    return declared_result(inst, [orgqr(a.astype(dt), np.asarray(args[-1]).astype(dt)),
                                  np.zeros(a.shape[:-2], np.int32)])


@target(pattern=r"lapack_(?:[sd]syevd|[cz]heevd)_ffi")
def cc_syevd_ffi(inst, args, ec):
    """xSYEVD / xHEEVD(mode V|N, uplo): (eigenvectors in columns, eigenvalues ascending, info)."""
    return _with_chars(inst, args[0], syevd, ("mode", "V"), ("uplo", "L"))


@target(pattern=r"lapack_(?:[sd]syevd|[cz]heevd)")
def cc_syevd_legacy(inst, args, ec):
    """Legacy xSYEVD(lower, batch, n, a) -> (v, w, info, workspaces...)."""
    a = np.asarray(args[-1])
    return declared_result(inst, syevd(a.astype(_prefix_dtype(inst, a.dtype)), "V", "L" if _scalar(args[0]) else "U"))


def _with_chars(inst, a, routine, *chars):
    """The declared result of routine(a in the target's type, each (attribute, default) of `chars`
    read from the backend config as one character)."""
    at = backend_attrs(inst)
    a = np.asarray(a)
    return declared_result(inst, routine(a.astype(_prefix_dtype(inst, a.dtype)), *(_char(at, k, d) for k, d in chars)))


def _svd(inst, a, mode, routine):
    shapes = leaf_shapes(inst.shape)
    dt = _prefix_dtype(inst, a.dtype)
    us = tuple(shapes[2].dims[-2:]) if len(shapes) > 2 else None
    vts = tuple(shapes[3].dims[-2:]) if len(shapes) > 3 else None
    return gesvd_family(a.astype(dt), mode, routine, us, vts)


@target(pattern=r"lapack_[sdcz]gesdd_ffi")
def cc_gesdd_ffi(inst, args, ec):
    """xGESDD(mode A|S|N): (a as LAPACK leaves it, singular values, u, vt, info)."""
    return declared_result(inst, _svd(inst, np.asarray(args[0]), _char(backend_attrs(inst), "mode", "A"), "gesdd"))


@target(pattern=r"lapack_[sdcz]gesvd_ffi")
def cc_gesvd_ffi(inst, args, ec):
    """xGESVD(mode A|S|N for both u and vt): (a as LAPACK leaves it, singular values, u, vt, info)."""
    return declared_result(inst, _svd(inst, np.asarray(args[0]), _char(backend_attrs(inst), "mode", "A"), "gesvd"))


@target(pattern=r"lapack_[sdcz]gesdd")
def cc_gesdd_legacy(inst, args, ec):
    """Legacy xGESDD(full_matrices, compute_uv, batch, m, n, [lwork,] a) -> (a, s, u, vt, info,
    workspaces...)."""
    full, uv = bool(_scalar(args[0])), bool(_scalar(args[1]))
    mode = "N" if not uv else ("A" if full else "S")
    return declared_result(inst, _svd(inst, np.asarray(args[-1]), mode, "gesdd"))


@target(pattern=r"lapack_[sdcz]geev_ffi")
def cc_geev_ffi(inst, args, ec):
    """xGEEV(compute_left, compute_right V|N): real (wr, wi, vl, vr, info), complex (w, vl, vr, info),
    eigenvectors complex."""
    return _with_chars(inst, args[0], geev, ("compute_left", "V"), ("compute_right", "V"))


@target(pattern=r"lapack_[sdcz]geev")
def cc_geev_legacy(inst, args, ec):
    """Legacy xGEEV(batch, n, jobvl, jobvr, a) -> (workspaces..., eigenvalues..., vl, vr, info)."""
    a = np.asarray(args[-1])
    dt = _prefix_dtype(inst, a.dtype)
    jobvl, jobvr = chr(_scalar(args[2])), chr(_scalar(args[3]))
    outs = geev(a.astype(dt), jobvl, jobvr)
    nws = 3 if dt.kind == "f" else 2
    return declared_result(inst, [None] * nws + list(outs))


@target(pattern=r"lapack_[sdcz]gees_ffi")
def cc_gees_ffi(inst, args, ec):
    """xGEES(mode V|N, sort N): real (t, vs, wr, wi, sdim, info), complex (t, vs, w, sdim, info)."""
    at = backend_attrs(inst)
    a = np.asarray(args[0])
    return declared_result(inst, gees(a.astype(_prefix_dtype(inst, a.dtype)), _char(at, "mode", "V")))


@target(pattern=r"lapack_[sdcz]gehrd_ffi")
def cc_gehrd_ffi(inst, args, ec):
    """xGEHRD(low, high): (Hessenberg form and reflectors, tau, info)."""
    at = backend_attrs(inst)
    a = np.asarray(args[0])
    n = a.shape[-1]
    return declared_result(inst, gehrd(a.astype(_prefix_dtype(inst, a.dtype)), int(at.get("low", 1)),
                                       int(at.get("high", n))))


@target(pattern=r"lapack_(?:[sd]sytrd|[cz]hetrd)_ffi")
def cc_sytrd_ffi(inst, args, ec):
    """xSYTRD / xHETRD(uplo): (a, diagonal, off-diagonal, tau, info)."""
    a = np.asarray(args[0])
    return declared_result(inst, sytrd(a.astype(_prefix_dtype(inst, a.dtype)), _char(backend_attrs(inst), "uplo", "L")))


@target(pattern=r"lapack_(?:[sd]ormqr|[cz]unmqr)_ffi")
def cc_ormqr_ffi(inst, args, ec):
    """xORMQR / xUNMQR(a, tau, c) with left/transpose: c multiplied by Q (jax.lax.linalg.ormqr)."""
    at = backend_attrs(inst)
    a, tau, c = (np.asarray(v) for v in args)
    return declared_result(inst, [ormqr(a, tau, c, bool(at.get("left", True)), bool(at.get("transpose", False)))])


@target(pattern=r"lapack_[sdcz]gtsv_ffi")
def cc_gtsv_ffi(inst, args, ec):
    """xGTSV(dl, d, du, b): (dl, d, du, x, info) for the tridiagonal system (jax.lax.linalg.tridiagonal_solve)."""
    dt = _prefix_dtype(inst, np.asarray(args[3]).dtype)
    return declared_result(inst, gtsv(*[np.asarray(v).astype(dt) for v in args]))
