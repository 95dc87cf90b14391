"""The operand contract of every LAPACK / BLAS custom call, checked before any foreign code runs,
and the memory layouts the kernels read and write.

jaxlib's CPU kernels (jaxlib/cpu/lapack_kernels.cc) trust their buffers: sizes come from the
dimensions of one buffer (the matrix `x`, or `b` for trsm and gtsv) and the others are read and
written as if they had the matching sizes.  A module whose operands are smaller than that makes
LAPACK read or write past them (heap corruption, a segfault, or silently wrong values), so here
every operand and every result of a call is checked against the sizes the routine will touch,
before the call; a mismatch is a located HloEvalError (exit 1).

Shapes, with T the element type named by the target's letter (s f32, d f64, c c64, z c128), R its
real type, C its complex type, I s32, B the batch dims (all dims but the last two of the main
matrix) and k = min(m, n):

  potrf   x T[B,n,n]                      -> x T[B,n,n], info I[B]
  trsm    a T[B,p,p], b T[B,m,n] [, alpha T[]] -> x T[B,m,n]        (p = m for side L, n for R)
  getrf   x T[B,m,n]                      -> x, ipiv I[B,k], info I[B]
  geqrf   x T[B,m,n]                      -> x, tau T[B,k]
  geqp3   x T[B,m,n], jpvt I[B,n]         -> x, jpvt I[B,n], tau T[B,k]
  orgqr   x T[B,m,n], tau T[B,t] (m >= n >= t) -> x
  syevd   x T[B,n,n]                      -> x, w R[B,n], info I[B]
  gesdd / gesvd x T[B,m,n]                -> x, s R[B,k], u T[B,m,um], vt T[B,vr,n], info I[B]
          (mode A: um = m, vr >= n; S: um = k, vr >= k; N: u and vt not touched)
  geev    x T[B,n,n] -> real: wr, wi T[B,n], vl, vr C[B,n,n], info; complex: w, vl, vr, info
  gees    x T[B,n,n] -> t, vs T[B,n,n], real: wr, wi T[B,n] / complex: w T[B,n], sdim I[B], info I[B]
  gehrd   x T[B,n,n] (1 <= low <= high <= n) -> x, tau T[B,n-1], info I[B]
  sytrd   x T[B,n,n]                      -> x, d R[B,n], e R[B,n-1], tau T[B,n-1], info I[B]
  gtsv    dl, d, du T[B,n], b T[B,n,r]    -> dl, d, du, b, info I[B]
  ormqr   a T[B,r,ka], tau T[B,k], c T[B,m,n] (r = m if left else n, k <= r, k <= ka) -> c T[B,m,n]

The legacy (non-FFI) targets pass sizes as leading scalar operands; the kernels of older jaxlibs
trusted them, so they must equal the sizes of the arrays.

Layouts (measured on XLA CPU through jaxlib 0.10.2): a kernel reads each matrix column-major
within batch-major order (minor_to_major {r-2, r-1, r-3, ..., 0}) and vectors row-major, whatever
the module says.  The layout XLA gives an operand is its `operand_layout_constraints` entry, or
the default row-major one when the call has no constraints (CpuLayoutAssignment); a result is
laid out as declared (row-major when the text gives no layout).  A matrix laid out otherwise is
seen by the kernel as its buffer reinterpreted (a transposed square matrix for row-major), and
`to_kernel` / `from_kernel` reproduce exactly that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...errors import HloEvalError
from ...ir.dtypes import from_numpy

TYPE_OF_LETTER = {"s": np.dtype(np.float32), "d": np.dtype(np.float64), "c": np.dtype(np.complex64),
          "z": np.dtype(np.complex128)}
_REAL = {"s": "s", "d": "d", "c": "s", "z": "d"}
_CPLX = {"s": "c", "d": "z", "c": "c", "z": "z"}
I32 = np.dtype(np.int32)

_TARGET = re.compile(r"(?:lapack|blas)_([sdcz])([a-z0-9]+?)(_ffi)?")
# the routine names of one family (the complex spelling of the real one)
_FAMILY = {"ungqr": "orgqr", "unmqr": "ormqr", "heevd": "syevd", "hetrd": "sytrd"}


def txt(dtype, dims) -> str:
    """`f32[2,3]` for a dtype and dims."""
    et = from_numpy(np.dtype(dtype))
    return f"{et.name if et else np.dtype(dtype)}[{','.join(map(str, dims))}]"


@dataclass(frozen=True)
class Slot:
    """What the kernel touches in one operand or result: its role, element type, dims (None: any
    dims of the given rank) and whether it is a matrix (read column-major)."""
    role: str
    dtype: np.dtype
    dims: tuple | None
    matrix: bool = False
    rank: int | None = None


@dataclass(frozen=True)
class Contract:
    operands: tuple[Slot, ...]
    results: tuple[Slot, ...]


def parse_target(name: str):
    """(letter, routine family, is_ffi) of a LAPACK/BLAS target name, or None."""
    m = _TARGET.fullmatch(name)
    if not m:
        return None
    letter, routine, ffi = m.groups()
    return letter, _FAMILY.get(routine, routine), bool(ffi)


def _fail(inst, msg):
    raise HloEvalError(f"custom-call target '{inst.attrs.get('custom_call_target')}': {msg}")


def batched_matrix(inst, x, role, rank_min=2):
    if x.ndim < rank_min:
        _fail(inst, f"{role} must have rank >= {rank_min} (batch dims, then the matrix), got "
                    f"{txt(x.dtype, x.shape)}")
    return tuple(x.shape[:-2]), x.shape[-2], x.shape[-1]


def char(attrs: dict, key: str, default: str) -> str:
    """A one-character option of backend_config (`{uplo = 76 : ui8}` -> 'L')."""
    v = attrs.get(key)
    if v is None:
        return default
    return chr(v) if isinstance(v, int) else str(v)[:1]


def _int(x) -> int:
    return int(np.asarray(x).reshape(-1)[0])


def svd_mode(inst, args, attrs) -> str:
    """'A', 'S' or 'N' from the FFI backend_config or the legacy (full_matrices, compute_uv) scalars."""
    if parse_target(inst.attrs.get("custom_call_target", ""))[2]:
        return char(attrs, "mode", "A")
    full, uv = bool(_int(args[0])), bool(_int(args[1]))
    return "N" if not uv else ("A" if full else "S")


# the one-character options of the FFI targets: (backend_config key, default, allowed values)
_OPTIONS = {
    "potrf": [("uplo", "L", "LU")],
    "trsm": [("side", "L", "LR"), ("uplo", "L", "LU"), ("trans_x", "N", "NTC"), ("diag", "N", "NU")],
    "syevd": [("mode", "V", "VN"), ("uplo", "L", "LU")],
    "gesdd": [("mode", "A", "ASN")],
    "gesvd": [("mode", "A", "ASN")],
    "geev": [("compute_left", "V", "VN"), ("compute_right", "V", "VN")],
    "gees": [("mode", "V", "VN"), ("sort", "N", "N")],
    "sytrd": [("uplo", "L", "LU")],
}


def _check_options(inst, args, attrs, routine, ffi) -> None:
    """LAPACK rejects other option letters by printing to stdout (XERBLA) and returning: refuse
    them first."""
    if ffi:
        for key, default, allowed in _OPTIONS.get(routine, ()):
            v = char(attrs, key, default)
            if v not in allowed:
                _fail(inst, f"backend_config {key} must be one of {', '.join(map(repr, allowed))} "
                            f"({', '.join(str(ord(c)) for c in allowed)} : ui8), got {v!r}")
        return
    if routine == "geev" and len(args) >= 4:
        for i in (2, 3):
            v = _int(args[i])
            if v not in (ord("V"), ord("N")):
                _fail(inst, f"operand {i} (jobv{'lr'[i - 2]}) must be 'V' (86) or 'N' (78), got {v}")
    if routine == "trsm" and len(args) >= 3 and _int(args[2]) not in (0, 1, 2):
        _fail(inst, f"operand 2 (trans_a) must be 0 (N), 1 (T) or 2 (C), got {_int(args[2])}")


# operand counts of the legacy targets (leading size/flag scalars, then the arrays)
_LEGACY_COUNTS = {"potrf": (4,), "getrf": (4,), "geqrf": (5,), "orgqr": (7,), "syevd": (4,), "gesdd": (6, 7),
                  "geev": (5,), "trsm": (10,)}


def contract(inst, args, attrs: dict) -> Contract:
    """The contract of LAPACK target `inst` given its runtime operands `args` (the main matrix
    decides the sizes); raises a located-later HloEvalError when the operand count or the main
    matrix itself cannot be right."""
    letter, routine, ffi = parse_target(inst.attrs.get("custom_call_target", ""))
    if not ffi and len(args) not in _LEGACY_COUNTS.get(routine, (len(args),)):
        want = " or ".join(map(str, _LEGACY_COUNTS[routine]))
        _fail(inst, f"takes {want} operands (size and flag scalars, then the arrays), got {len(args)}")
    _check_options(inst, args, attrs, routine, ffi)
    T, R, C = TYPE_OF_LETTER[letter], TYPE_OF_LETTER[_REAL[letter]], TYPE_OF_LETTER[_CPLX[letter]]
    cplx = letter in "cz"
    M = lambda role, dims: Slot(role, T, dims, True)           # noqa: E731
    V = lambda role, dt, dims: Slot(role, dt, dims)            # noqa: E731

    def need(count):
        if len(args) != count:
            _fail(inst, f"takes {count} operand{'s' if count != 1 else ''}, got {len(args)}")

    if routine in ("potrf", "syevd", "geev", "gees", "gehrd", "sytrd", "getrf", "geqrf", "gesdd", "gesvd"):
        if ffi:
            need(1)
        if not args:
            _fail(inst, "takes the matrix as its last operand, got no operands")
        x = np.asarray(args[-1])
        B, m, n = batched_matrix(inst, x, "the matrix operand")
        k = min(m, n)
        if routine in ("potrf", "syevd", "geev", "gees", "gehrd", "sytrd") and m != n:
            _fail(inst, f"{routine} factors square matrices; the matrix operand is {txt(x.dtype, x.shape)}")
        xs = M("the matrix", B + (m, n))
        info = V("info", I32, B)
        ops = (xs,)
        if routine == "potrf":
            res = (M("the factor", B + (n, n)), info)
        elif routine == "getrf":
            res = (M("the LU factors", B + (m, n)), V("the pivots", I32, B + (k,)), info)
        elif routine == "geqrf":
            res = (M("the QR factors", B + (m, n)), V("tau", T, B + (k,)))
        elif routine == "syevd":
            res = (M("the eigenvectors", B + (n, n)), V("the eigenvalues", R, B + (n,)), info)
        elif routine in ("gesdd", "gesvd"):
            mode = svd_mode(inst, args, attrs)
            if mode == "A":
                um, vr = m, n
            elif mode == "S":
                um, vr = k, k
            else:
                um = vr = None
            u = Slot("u", T, B + (m, um) if um is not None else None, True, len(B) + 2)
            vt = Slot("vt", T, None, True, len(B) + 2)
            res = (M("the overwritten matrix", B + (m, n)), V("the singular values", R, B + (k,)), u, vt, info)
            if vr is not None:
                res = res[:3] + (Slot("vt", T, ("rows>=", vr, B, n), True, len(B) + 2),) + res[4:]
        elif routine == "geev":
            vec = Slot("the eigenvectors", C, B + (n, n), True)
            vals = (V("the eigenvalues", T, B + (n,)),) if cplx else (V("the eigenvalues' real parts", T, B + (n,)),
                                                                      V("the eigenvalues' imaginary parts", T, B + (n,)))
            res = vals + (vec, vec, info)
        elif routine == "gees":
            vals = (V("the eigenvalues", T, B + (n,)),) if cplx else (V("the eigenvalues' real parts", T, B + (n,)),
                                                                      V("the eigenvalues' imaginary parts", T, B + (n,)))
            res = (M("the Schur form", B + (n, n)), M("the Schur vectors", B + (n, n))) + vals + (
                V("sdim", I32, B), info)
        elif routine == "gehrd":
            low, high = int(attrs.get("low", 1)), int(attrs.get("high", n))
            if n and not 1 <= low <= high <= n:
                _fail(inst, f"gehrd needs 1 <= low <= high <= n = {n}, got low = {low}, high = {high}")
            res = (M("the Hessenberg form", B + (n, n)), V("tau", T, B + (max(n - 1, 0),)), info)
        else:                                                   # sytrd
            res = (M("the tridiagonal form", B + (n, n)), V("the diagonal", R, B + (n,)),
                   V("the off-diagonal", R, B + (max(n - 1, 0),)), V("tau", T, B + (max(n - 1, 0),)), info)
        if not ffi:
            ops = tuple(Slot(f"scalar operand {i}", None, (), False) for i in range(len(args) - 1)) + ops
        return Contract(ops, res)

    if routine == "geqp3":
        need(2)
        x = np.asarray(args[0])
        B, m, n = batched_matrix(inst, x, "the matrix operand")
        return Contract((M("the matrix", B + (m, n)), V("jpvt", I32, B + (n,))),
                        (M("the QR factors", B + (m, n)), V("jpvt", I32, B + (n,)), V("tau", T, B + (min(m, n),))))

    if routine == "orgqr":
        if ffi:
            need(2)
        elif len(args) < 2:
            _fail(inst, f"takes the reflectors and tau as its last two operands, got {len(args)} operand(s)")
        x, tau = np.asarray(args[-2]), np.asarray(args[-1])
        B, m, n = batched_matrix(inst, x, "the reflectors operand")
        if tau.ndim != len(B) + 1:
            _fail(inst, f"tau must be {txt(T, B + ('k',))}, got {txt(tau.dtype, tau.shape)}")
        t = tau.shape[-1]
        if not m >= n >= t:
            _fail(inst, f"{routine} needs rows >= columns >= reflectors (m >= n >= k), got m = {m}, n = {n}, "
                        f"k = {t} ({txt(x.dtype, x.shape)}, tau {txt(tau.dtype, tau.shape)})")
        ops = (M("the reflectors", B + (m, n)), V("tau", T, B + (t,)))
        if not ffi:
            ops = tuple(Slot(f"scalar operand {i}", None, (), False) for i in range(len(args) - 2)) + ops
        res = (M("q", B + (m, n)),) + (() if ffi else (V("info", I32, B),))
        return Contract(ops, res)

    if routine == "trsm":
        if ffi and len(args) not in (2, 3):
            _fail(inst, f"takes 2 operands (a, b) or 3 (a, b, alpha), got {len(args)}")
        if ffi:
            a, b = np.asarray(args[0]), np.asarray(args[1])
            side = char(attrs, "side", "L")
        else:
            if len(args) != 10:
                _fail(inst, f"takes 10 operands (left_side, lower, trans_a, unit_diag, m, n, batch, alpha, a, b), "
                            f"got {len(args)}")
            a, b = np.asarray(args[-2]), np.asarray(args[-1])
            side = "L" if int(np.asarray(args[0]).reshape(-1)[0]) else "R"
        B, m, n = batched_matrix(inst, b, "b")
        p = m if side == "L" else n
        ops = (M("a", B + (p, p)), M("b", B + (m, n)))
        if ffi and len(args) == 3:
            ops += (V("alpha", T, ()),)
        if not ffi:
            ops = tuple(Slot(f"scalar operand {i}", None, (), False) for i in range(7)) + (V("alpha", T, ()),) + ops
        return Contract(ops, (M("x", B + (m, n)),))

    if routine == "gtsv":
        need(4)
        b = np.asarray(args[3])
        B, n, r = batched_matrix(inst, b, "b")
        diag = lambda role: V(role, T, B + (n,))               # noqa: E731
        ops = (diag("dl"), diag("d"), diag("du"), M("b", B + (n, r)))
        return Contract(ops, ops[:3] + (M("x", B + (n, r)), V("info", I32, B)))

    if routine == "ormqr":
        need(3)
        a, tau, c = (np.asarray(x) for x in args)
        B, m, n = batched_matrix(inst, c, "c")
        left = bool(attrs.get("left", True))
        r = m if left else n
        if a.ndim != len(B) + 2 or tau.ndim != len(B) + 1:
            _fail(inst, f"takes a {txt(T, B + ('r', 'k'))}, tau {txt(T, B + ('k',))} and c {txt(T, B + (m, n))}; "
                        f"got a {txt(a.dtype, a.shape)}, tau {txt(tau.dtype, tau.shape)}")
        k = tau.shape[-1]
        if k > r or a.shape[-1] < k:
            _fail(inst, f"ormqr applies k = {k} reflectors (tau {txt(tau.dtype, tau.shape)}), which needs "
                        f"k <= {r} ({'rows' if left else 'columns'} of c) and at least k columns in a "
                        f"({txt(a.dtype, a.shape)})")
        ops = (M("the reflectors", B + (r, a.shape[-1])), V("tau", T, B + (k,)), M("c", B + (m, n)))
        return Contract(ops, (M("the product", B + (m, n)),))

    _fail(inst, f"no operand contract is known for routine {routine}")
    raise AssertionError


def _dims_ok(slot: Slot, shape) -> bool:
    d = slot.dims
    if d is None:
        return slot.rank is None or len(shape) == slot.rank
    if d and d[0] == "rows>=":
        _, rows, B, n = d
        return len(shape) == len(B) + 2 and tuple(shape[:-2]) == B and shape[-2] >= rows and shape[-1] == n
    return tuple(shape) == tuple(d)


def _want(slot: Slot) -> str:
    d = slot.dims
    if d is None:
        return f"rank {slot.rank}" if slot.rank is not None else "any shape"
    if d and d[0] == "rows>=":
        _, rows, B, n = d
        return f"{txt(slot.dtype, B + ('r', n))} with r >= {rows}"
    return txt(slot.dtype, d)


def _result_offset(inst, nleaves: int, nres: int) -> int:
    """Where the contract's results start among the declared leaves: FFI calls declare exactly
    them; legacy calls add workspaces after them, except geev, which puts them first."""
    parsed = parse_target(inst.attrs.get("custom_call_target", ""))
    routine, ffi = parsed[1:] if parsed else ("", True)     # other libraries' targets: FFI-like
    if ffi:
        if nleaves != nres:
            _fail(inst, f"returns {nres} result{'s' if nres != 1 else ''}, the declared shape "
                        f"{inst.shape.to_str(False)} has {nleaves}")
        return 0
    if nleaves < nres:
        _fail(inst, f"returns at least {nres} results, the declared shape {inst.shape.to_str(False)} "
                    f"has {nleaves}")
    return nleaves - nres if routine == "geev" else 0


def _leaves(shape):
    return list(shape.leaves()) if shape.is_tuple else [shape]


def check(inst, args, c: Contract) -> None:
    """Every operand and every declared result leaf against the contract."""
    from ..values import np_dtype
    if len(args) != len(c.operands):
        _fail(inst, f"takes {len(c.operands)} operands, got {len(args)}")
    for i, (x, slot) in enumerate(zip(args, c.operands)):
        x = np.asarray(x)
        if slot.dtype is None:                 # a legacy size/flag scalar
            if x.size != 1:
                _fail(inst, f"operand {i} ({slot.role}) must be a scalar, got {txt(x.dtype, x.shape)}")
            continue
        if x.dtype != slot.dtype or not _dims_ok(slot, x.shape):
            _fail(inst, f"operand {i} ({slot.role}) must be {_want(slot)}, got {txt(x.dtype, x.shape)}")
    leaves = _leaves(inst.shape)
    lead = _result_offset(inst, len(leaves), len(c.results))
    for j, slot in enumerate(c.results):
        leaf = leaves[lead + j]
        if leaf.is_tuple or np_dtype(leaf) != slot.dtype or not _dims_ok(slot, leaf.dims):
            _fail(inst, f"result {lead + j} ({slot.role}) must be {_want(slot)}, the declared shape says "
                        f"{leaf.to_str(False)}")
    _check_legacy_sizes(inst, args)


# legacy operand index -> which size it must equal: ("B",) batch count, ("d", -2) a dim of the
# main matrix (the last operand, or the one named by the routine)
_LEGACY_SIZES = {
    "potrf": {1: "batch", 2: "n"},
    "syevd": {1: "batch", 2: "n"},
    "getrf": {0: "batch", 1: "m", 2: "n"},
    "geqrf": {0: "batch", 1: "m", 2: "n"},
    "orgqr": {0: "batch", 1: "m", 2: "n", 3: "k"},
    "geev": {0: "batch", 1: "n"},
    "trsm": {4: "m", 5: "n", 6: "batch"},
}


def _check_legacy_sizes(inst, args) -> None:
    """Legacy targets pass sizes as scalars, which older jaxlibs trusted: they must equal the sizes
    of the arrays."""
    parsed = parse_target(inst.attrs.get("custom_call_target", ""))
    if parsed is None or parsed[2]:
        return
    routine = parsed[1]
    table = dict(_LEGACY_SIZES.get(routine, {}))
    if routine == "gesdd":
        table = {2: "batch", 3: "m", 4: "n"}
    if routine == "orgqr":
        main, tau = np.asarray(args[-2]), np.asarray(args[-1])
    else:
        main, tau = np.asarray(args[-1]), None
    sizes = {"batch": int(np.prod(main.shape[:-2], dtype=np.int64)), "m": main.shape[-2], "n": main.shape[-1]}
    if tau is not None:
        sizes["k"] = tau.shape[-1]
    for i, what in table.items():
        if i >= len(args):
            continue
        got = _int(args[i])
        if got != sizes[what]:
            _fail(inst, f"size operand {i} ({what}) is {got}, but the arrays it describes have {what} = "
                        f"{sizes[what]}")


# ---------------------------------------------------------------------------- layouts

def _colmajor(rank: int) -> tuple[int, ...]:
    """The minor_to_major order a kernel reads a matrix in: rows fastest, then columns, then batch."""
    if rank < 2:
        return tuple(range(rank - 1, -1, -1))
    return (rank - 2, rank - 1) + tuple(range(rank - 3, -1, -1))


def _rowmajor(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 1, -1, -1))


def _m2m(shape) -> tuple[int, ...]:
    lay = shape.layout if shape is not None else None
    if lay is None or len(lay.minor_to_major) != len(shape.dims):
        return _rowmajor(len(shape.dims)) if shape is not None else ()
    return tuple(lay.minor_to_major)


def relayout(x: np.ndarray, src: tuple[int, ...], dst: tuple[int, ...]) -> np.ndarray:
    """The logical array whose buffer under layout `dst` equals the buffer of `x` under `src`
    (the same bytes read with another layout)."""
    if src == dst or x.ndim < 2:
        return x
    src_major = list(reversed(src))
    dst_major = list(reversed(dst))
    flat = np.ascontiguousarray(x.transpose(src_major)).reshape(-1)
    phys = flat.reshape([x.shape[d] for d in dst_major])
    return np.ascontiguousarray(phys.transpose(np.argsort(dst_major)))


def operand_layouts(inst, args) -> list[tuple[int, ...]]:
    """The layout XLA gives each operand: its operand_layout_constraints entry, else row-major."""
    olc = inst.attrs.get("operand_layout_constraints")
    shapes = list(olc.shapes) if olc is not None else []
    out = []
    for i, a in enumerate(args):
        r = np.ndim(a)
        if i < len(shapes) and shapes[i] is not None and not shapes[i].is_tuple:
            out.append(_m2m(shapes[i]))
        else:
            out.append(_rowmajor(r))
    return out


def to_kernel(inst, args, c: Contract) -> list:
    """The operands as the kernel sees them (matrices reinterpreted column-major)."""
    lays = operand_layouts(inst, args)
    out = []
    for a, slot, lay in zip(args, c.operands, lays):
        a = np.asarray(a)
        want = _colmajor(a.ndim) if slot.matrix else _rowmajor(a.ndim)
        out.append(relayout(a, lay, want))
    return out


def from_kernel(inst, value, c: Contract):
    """The declared result from what the kernel wrote: each leaf reinterpreted from the kernel's
    layout (column-major matrices, row-major vectors) into its declared layout."""
    leaves = _leaves(inst.shape)
    vals = list(value) if isinstance(value, tuple) else [value]
    lead = _result_offset(inst, len(leaves), len(c.results))
    for j, slot in enumerate(c.results):
        k = lead + j
        v = vals[k]
        if isinstance(v, np.ndarray) and v.ndim >= 2:
            want = _colmajor(v.ndim) if slot.matrix else _rowmajor(v.ndim)
            vals[k] = relayout(v, want, _m2m(leaves[k]))
    return tuple(vals) if isinstance(value, tuple) else vals[0]
