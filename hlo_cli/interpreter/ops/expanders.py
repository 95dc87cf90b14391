"""Custom-call targets that XLA CPU runs itself instead of calling a library: the dynamic-shape
conversions its emitter handles (`SliceToDynamic`, `PadToStatic`), the value-inference annotation
`SetBound`, and the targets XLA's own expanders lower in XLA CPU's pipeline (`Qr` and
`ProductOfElementaryHouseholderReflectors` by QrExpander, `Eigh` by EighExpander), which XLA's
builder library and TensorFlow's bridge emit (tf.linalg.qr / tf.linalg.eigh under jit_compile).

Each follows XLA's definition:

* SliceToDynamic(x, s_0, ..., s_{r-1}): the result is x[:s_0, ..., :s_{r-1}] with those runtime
  sizes (XLA CPU's emitter copies that box into the dynamic result's buffer).  A size outside
  [0, bound] makes XLA write outside the result's buffer; we refuse it.
* PadToStatic(x): (x written into the start of a static array of the bound's dims, then one s32
  runtime size per dimension).  XLA's legacy emitter leaves the rest of the static array
  unwritten (XLA CPU's current runtime does not implement PadToStatic at all: "Custom call target
  PadToStatic is not implemented", measured on jaxlib 0.10.2); we fill it with zeros.
* SetBound(x): x (only value inference reads the bound; measured on XLA CPU).
* Qr(a): Householder QR exactly as qr_expander.cc: blocks of 128 columns, each factored column by
  column (house: beta = -sign(alpha) * norm, tau = (beta - alpha) / beta, v = x / (alpha - beta)),
  the trailing columns updated with the compact WY form of the block (Schreiber-Van Loan).
  Returns (R above the diagonal with the reflectors below it, taus) like LAPACK's geqrf.
* ProductOfElementaryHouseholderReflectors(a, taus): Q's first n columns (m >= n), built from the
  last block of 128 reflectors to the first with their compact WY forms.

* Eigh(a), backend_config "lower,sort_eigenvalues,max_iter,tol": (eigenvectors in columns,
  eigenvalues) by EighExpander's parallel two-sided Jacobi method: the symmetrized matrix split in
  four quadrants, each sweep 2k-1 rounds of 2x2 rotations with Brent and Luk's tournament
  permutations, sweeps until every matrix of the batch has off-diagonal mass at most tol^2 times
  its Frobenius mass (or max_iter sweeps), then sorted ascending if asked.

The arithmetic runs in the operand's type (dots as XLA's at HIGHEST precision), so results agree
with XLA's to a few ulps (its fused loops and blocked dots round a little differently) and signs,
orders and iteration counts are XLA's.  Measured against XLA CPU (jaxlib 0.10.2), f32/f64/c64,
batched, odd sizes, several blocks of 128, unsorted and non-converged Eigh.
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from ..parallel import blas_single
from .custom_call import declared_result, target
from .linalg import dot_values

BLOCK = 128          # QrExpander's block_size


# ---------------------------------------------------------------------------- dynamic shapes

@target("SliceToDynamic")
def cc_slice_to_dynamic(inst, args, ec):
    """x[:s_0, ..., :s_{r-1}] with the runtime sizes given by the s32 scalar operands."""
    x = np.asarray(args[0])
    dims = tuple(inst.shape.dims)
    if len(args) != 1 + x.ndim:
        raise HloEvalError(f"SliceToDynamic takes the array and one size per dimension ({1 + x.ndim} operands), "
                           f"got {len(args)}")
    sizes = []
    for d, s in enumerate(args[1:]):
        s = np.asarray(s)
        if s.size != 1 or s.dtype.kind not in "iu":
            raise HloEvalError(f"SliceToDynamic size operand {d + 1} must be an integer scalar, got {s.dtype}{list(s.shape)}")
        n = int(s.reshape(-1)[0])
        bound = min(x.shape[d], dims[d] if d < len(dims) else x.shape[d])
        if not 0 <= n <= bound:
            raise HloEvalError(f"SliceToDynamic size {n} for dimension {d} is outside [0, {bound}] (XLA would write "
                               f"past the result's buffer)")
        sizes.append(n)
    return np.ascontiguousarray(x[tuple(slice(0, n) for n in sizes)])


@target("PadToStatic")
def cc_pad_to_static(inst, args, ec):
    """(x in the start of a static array of the bound's dims, zeros elsewhere; s32 size of each dim)."""
    x = np.asarray(args[0])
    shapes = list(inst.shape.leaves()) if inst.shape.is_tuple else [inst.shape]
    data = shapes[0]
    if len(shapes) != 1 + x.ndim or len(data.dims) != x.ndim:
        raise HloEvalError(f"PadToStatic returns the static array and one s32 size per dimension "
                           f"({1 + x.ndim} results), the declared shape is {inst.shape.to_str(False)}")
    if any(n > b for n, b in zip(x.shape, data.dims)):
        raise HloEvalError(f"PadToStatic of a {list(x.shape)} value into {data.to_str(False)}: larger than the bound")
    out = np.zeros(tuple(data.dims), x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return declared_result(inst, [out] + [np.array(n, np.int32) for n in x.shape])


@target("SetBound")
def cc_set_bound(inst, args, ec):
    """The operand: the bound (a literal) only informs XLA's value inference."""
    return args[0]


# ---------------------------------------------------------------------------- QR (QrExpander)

_TYPES = (np.float32, np.float64, np.complex64, np.complex128)


def _check_float(x, what):
    if x.dtype not in [np.dtype(t) for t in _TYPES]:
        raise HloEvalError(f"{what} takes f32, f64, c64 or c128 matrices, got {x.dtype}")
    if x.ndim < 2:
        raise HloEvalError(f"{what} needs an operand of rank >= 2, got {x.dtype}{list(x.shape)}")


def _check_declared(inst, what, want):
    """The declared result against the (dtype, dims) leaves the expansion computes."""
    from ..values import np_dtype
    from .lapack_contract import txt
    leaves = list(inst.shape.leaves()) if inst.shape.is_tuple else [inst.shape]
    if len(leaves) != len(want) or any(
            np_dtype(s) != np.dtype(dt) or tuple(s.dims) != tuple(d) for s, (dt, d) in zip(leaves, want)):
        shown = ", ".join(txt(dt, d) for dt, d in want)
        raise HloEvalError(f"{what} returns {'(' + shown + ')' if len(want) > 1 else shown}, the declared shape is "
                           f"{inst.shape.to_str(False)}")


def _mm(a, b):
    """a @ b over the leading batch dims, with XLA's dot in the operands' type."""
    nb = a.ndim - 2
    bd = list(range(nb))
    return dot_values(a, b, bd, [nb + 1], bd, [nb], a.dtype)


def _ct(x):
    """Conjugate transpose of the last two dims."""
    return np.conj(np.swapaxes(x, -1, -2)) if x.dtype.kind == "c" else np.swapaxes(x, -1, -2)


def _norm(parts):
    """sqrt(sum of squares) as XLA's Norm: scaled by the largest magnitude, 0 when all are 0."""
    xs = [np.abs(p) for p in parts]
    w = xs[0]
    for p in xs[1:]:
        w = np.maximum(w, p)
    with np.errstate(all="ignore"):
        acc = None
        for p in xs:
            t = np.square(p / w)
            acc = t if acc is None else acc + t
        out = w * np.sqrt(acc)
    return np.where(w == 0, np.zeros_like(w), out)


def _house(x, k):
    """(v, tau, beta) of the Householder reflection zeroing x[k+1:] (x: [..., m]), as House() of
    qr_expander.cc."""
    dt = x.dtype
    m = x.shape[-1]
    alpha = x[..., k]
    after = x * (np.arange(m) > k).astype(dt)
    with np.errstate(all="ignore"):
        if dt.kind == "c":
            rdt = np.real(x).dtype
            sigma = np.sum(np.real(after * np.conj(after)), axis=-1, dtype=rdt)
            mu = _norm([np.real(alpha), np.imag(alpha), np.sqrt(sigma)])
            zero = (sigma == 0) & (np.imag(alpha) == 0)
            beta = np.where(np.real(alpha) < 0, rdt.type(1), rdt.type(-1)) * mu
            beta = np.where(zero, np.real(alpha), beta)
            tau = ((beta - np.real(alpha)) / beta + 1j * (-np.imag(alpha) / beta)).astype(dt)
        else:
            sigma = np.sum(after * after, axis=-1, dtype=dt)
            mu = _norm([alpha, np.sqrt(sigma)])
            zero = sigma == 0
            beta = np.where(alpha < 0, dt.type(1), dt.type(-1)) * mu
            beta = np.where(zero, alpha, beta)
            tau = (beta - alpha) / beta
        tau = np.where(zero, np.zeros_like(tau), tau).astype(dt)
        divisor = np.where(zero, dt.type(1), alpha - beta.astype(dt)).astype(dt)
        v = (np.arange(m) == k).astype(dt) + after / divisor[..., None]
    return v.astype(dt), tau, beta


def _qr_block(a):
    """Unblocked Householder QR of a [..., m, n] block: (R and reflectors, taus)."""
    a = a.copy()
    dt = a.dtype
    m, n = a.shape[-2:]
    taus = np.zeros(a.shape[:-2] + (min(m, n),), dt)
    rows = np.arange(m)
    cols = np.arange(n)
    for j in range(min(m, n)):
        x = a[..., :, j]
        v, tau, beta = _house(x, j)
        vb = v[..., None, :]                                             # [..., 1, m]
        masked = np.where(cols > j, a, np.zeros_like(a))
        vva = _mm(np.conj(vb) if dt.kind == "c" else vb, masked)       # [..., 1, n]
        vva = _mm(np.swapaxes(vb, -1, -2), vva)                        # [..., m, n]
        ctau = np.conj(tau) if dt.kind == "c" else tau
        a = (a - ctau[..., None, None] * vva).astype(dt)
        new_x = (x * (rows < j).astype(dt) + beta.astype(dt)[..., None] * (rows == j).astype(dt)
                 + np.where(rows > j, v, np.zeros_like(v))).astype(dt)
        a[..., :, j] = new_x
        taus[..., j] = tau
    return a, taus


def _strict_lower(x):
    r, c = x.shape[-2:]
    return np.where(np.arange(r)[:, None] > np.arange(c)[None, :], x, np.zeros_like(x))


def _compact_wy(y, taus):
    """T with I + Y T Y^H = the product of the block's reflectors (CompactWYRepresentation)."""
    dt = y.dtype
    k = y.shape[-1]
    eye = np.broadcast_to(np.eye(k, dtype=dt), y.shape[:-2] + (k, k))
    vtv = _mm(_ct(y), y)
    upper = np.arange(k)[:, None] < np.arange(k)[None, :]
    vtv = np.where(upper, vtv, np.zeros_like(vtv))
    vtv = ((vtv + eye) * (-taus)[..., None, :]).astype(dt)
    t = eye.copy()
    for j in range(k):
        z = _mm(t, vtv[..., :, j:j + 1])
        t[..., :, j:j + 1] = z
    return t


def qr_expanded(a):
    """(R with the reflectors below the diagonal, taus) by QrExpander's blocked algorithm."""
    a = a.copy()
    dt = a.dtype
    m, n = a.shape[-2:]
    p = min(m, n)
    taus = np.zeros(a.shape[:-2] + (p,), dt)
    for i in range(0, p, BLOCK):
        k = min(BLOCK, p - i)
        block, btaus = _qr_block(a[..., i:, i:i + k])
        y = (np.eye(m - i, k, dtype=dt) + _strict_lower(block)).astype(dt)
        a[..., i:, i:i + k] = block
        taus[..., i:i + k] = btaus
        t = _compact_wy(y, btaus)
        yt = _mm(y, _ct(t))
        panel = a[..., i:, i + k:]
        upd = _mm(yt, _mm(_ct(y), panel))
        a[..., i:, i + k:] = (panel + upd).astype(dt)
    return a, taus


def householder_product(a, taus):
    """Q's first n columns from reflectors and taus (ProductOfElementaryHouseholderReflectors)."""
    dt = a.dtype
    m, n = a.shape[-2:]
    p = taus.shape[-1]
    q = np.broadcast_to(np.eye(m, n, dtype=dt), a.shape[:-2] + (m, n)).copy()
    start = ((p - 1) // BLOCK) * BLOCK if p > 0 else 0
    for i in range(start, -1, -BLOCK):
        k = min(BLOCK, p - i)
        if k <= 0:
            continue
        y = (np.eye(m - i, k, dtype=dt) + _strict_lower(a[..., i:, i:i + k])).astype(dt)
        t = _compact_wy(y, taus[..., i:i + k])
        panel = q[..., i:, i:]
        upd = _mm(y, _mm(t, _mm(_ct(y), panel)))
        q[..., i:, i:] = (panel + upd).astype(dt)
    return q


@target("Qr")
def cc_qr(inst, args, ec):
    """Householder QR as XLA's QrExpander: (R above the diagonal and the reflectors below, taus)."""
    if len(args) != 1:
        raise HloEvalError(f"Qr takes one operand, got {len(args)}")
    a = np.asarray(args[0])
    _check_float(a, "Qr")
    _check_declared(inst, "Qr", [(a.dtype, a.shape), (a.dtype, a.shape[:-2] + (min(a.shape[-2:]),))])
    with np.errstate(all="ignore"), blas_single():      # sums independent of the thread count
        return declared_result(inst, list(qr_expanded(a)))


@target("ProductOfElementaryHouseholderReflectors")
def cc_householder_product(inst, args, ec):
    """Q = H(0) ... H(p-1) (first n columns) from Qr's reflectors and taus, as XLA's QrExpander."""
    if len(args) != 2:
        raise HloEvalError(f"ProductOfElementaryHouseholderReflectors takes (a, taus), got {len(args)} operands")
    a, taus = np.asarray(args[0]), np.asarray(args[1])
    what = "ProductOfElementaryHouseholderReflectors"
    _check_float(a, what)
    m, n = a.shape[-2:]
    if m < n:
        raise HloEvalError(f"{what} needs m >= n, got a {a.dtype}{list(a.shape)}")
    if taus.dtype != a.dtype or taus.shape[:-1] != a.shape[:-2] or taus.ndim != a.ndim - 1 or taus.shape[-1] > n:
        raise HloEvalError(f"{what}: taus must be {a.dtype}{list(a.shape[:-2]) + ['k']} with k <= {n}, "
                           f"got {taus.dtype}{list(taus.shape)}")
    _check_declared(inst, what, [(a.dtype, a.shape)])
    with np.errstate(all="ignore"), blas_single():      # sums independent of the thread count
        return declared_result(inst, [householder_product(a, taus)])


# ---------------------------------------------------------------------------- Eigh (EighExpander)

def _symmetrize(a, lower: bool):
    """The Hermitian matrix given by a's lower (or upper) triangle, as XLA's Symmetrize."""
    n = a.shape[-1]
    r, c = np.arange(n)[:, None], np.arange(n)[None, :]
    mask = r >= c if lower else ~(r - 1 >= c)
    at = np.swapaxes(a, -1, -2)
    if a.dtype.kind != "c":
        return np.where(mask, a, at)
    im_mask = r - 1 >= c if lower else ~(r >= c)
    re = np.where(mask, a.real, at.real)
    im = np.where(im_mask, a.imag, np.zeros_like(a.imag))
    im = np.where(mask, im, -np.swapaxes(im, -1, -2))
    return (re + 1j * im).astype(a.dtype)


def _diag(x):
    return np.diagonal(x, axis1=-2, axis2=-1)


def _set_diag(x, d):
    x = x.copy()
    k = x.shape[-1]
    x[..., np.arange(k), np.arange(k)] = d
    return x


def _rotation(tl, tr, br):
    """(rt1, rt2, c, s) of the 2x2 Hermitian eigenproblems on the quadrants' diagonals
    (HermitianEigenDecomposition2x2)."""
    cplx = tl.dtype.kind == "c"
    a, b, d = np.real(_diag(tl)), _diag(tr), np.real(_diag(br))
    rdt = a.dtype
    if cplx:
        abs_b = np.abs(b)
        w = np.where(abs_b == 0, np.ones_like(b), np.conj(b) / (abs_b + 0j).astype(b.dtype))
        b = abs_b
    one, two = rdt.type(1), rdt.type(2)
    tau = (d - a) / (two * b)
    t = np.sqrt(one + np.square(tau))
    t = one / (tau + np.where(tau >= 0, t, -t))
    tiny = rdt.type(np.float32(0.1) * np.finfo(np.float32).eps)
    t = np.where(np.abs(b) <= tiny * np.minimum(np.abs(a), np.abs(d)), np.zeros_like(t), t)
    c = one / np.sqrt(one + np.square(t))
    s = t * c
    rt1 = a - t * b
    rt2 = d + t * b
    if cplx:
        dt = tl.dtype
        return rt1.astype(dt), rt2.astype(dt), c.astype(dt), (s.astype(dt) * w).astype(dt)
    return rt1, rt2, c, s


def _over_rows(c, s, tl, tr, bl, br):
    c, s = c[..., :, None], s[..., :, None]
    sc = np.conj(s) if s.dtype.kind == "c" else s
    return tl * c - bl * sc, tr * c - br * sc, tl * s + bl * c, tr * s + br * c


def _over_cols(c, s, tl, tr, bl, br):
    c, s = c[..., None, :], s[..., None, :]
    sc = np.conj(s) if s.dtype.kind == "c" else s
    return tl * c - tr * s, tl * sc + tr * c, bl * c - br * s, bl * sc + br * c


def _permute_rows(top, bottom):
    k = top.shape[-1]
    if k <= 1:
        return top, bottom
    return (np.concatenate([top[..., :1, :], bottom[..., :1, :], top[..., 1:k - 1, :]], axis=-2),
            np.concatenate([bottom[..., 1:, :], top[..., k - 1:, :]], axis=-2))


def _permute_cols(left, right):
    k = left.shape[-1]
    if k <= 1:
        return left, right
    return (np.concatenate([left[..., :1], right[..., :1], left[..., 1:k - 1]], axis=-1),
            np.concatenate([right[..., 1:], left[..., k - 1:]], axis=-1))


def _sq(x):
    return np.real(x * np.conj(x)) if x.dtype.kind == "c" else x * x


def _off(x):
    k = x.shape[-1]
    return np.where(np.eye(k, dtype=bool), np.zeros_like(x), x)


def eigh_expanded(a, lower: bool, max_iter: int, tol: float, sort: bool):
    """(eigenvectors in columns, eigenvalues) by EighExpander's parallel two-sided Jacobi method:
    the matrix in four quadrants, 2k-1 rotation rounds per sweep with Brent-Luk's tournament
    permutations, sweeps while any matrix of the batch has off-diagonal mass above tol."""
    dt = a.dtype
    n = a.shape[-1]
    if n <= 1:
        return np.ones_like(a), np.real(_diag(a)).copy()
    a = _symmetrize(a, lower)
    k = -(-n // 2)
    tl, bl = a[..., :k, :k], a[..., k:, :k]
    tr, br = a[..., :k, k:], a[..., k:, k:]
    if n % 2:
        pad = [(0, 0)] * (a.ndim - 2)
        tr = np.pad(tr, pad + [(0, 0), (0, 1)])
        bl = np.pad(bl, pad + [(0, 1), (0, 0)])
        br = np.pad(br, pad + [(0, 1), (0, 1)])
    batch = a.shape[:-2]
    v_tl = np.broadcast_to(np.eye(k, dtype=dt), batch + (k, k)).copy()
    v_br = v_tl.copy()
    v_tr = np.zeros_like(v_tl)
    v_bl = np.zeros_like(v_tl)
    rdt = np.real(a).dtype
    tol2 = np.square(rdt.type(np.float32(tol)))          # XLA parses tol as a C++ float
    it = 0
    while it < max_iter:
        frob = np.sum(_sq(tl) + _sq(tr) + _sq(bl) + _sq(br), axis=(-2, -1), dtype=rdt)
        off = np.sum(_sq(_off(tl)) + _sq(tr) + _sq(bl) + _sq(_off(br)), axis=(-2, -1), dtype=rdt)
        if not np.any(frob * tol2 < off):
            break
        for _ in range(2 * k - 1):
            rt1, rt2, c, s = _rotation(tl, tr, br)
            tl, tr, bl, br = _over_rows(c, s, tl, tr, bl, br)
            tl, tr, bl, br = _over_cols(c, s, tl, tr, bl, br)
            tl, br = _set_diag(tl, rt1), _set_diag(br, rt2)
            tr, bl = _set_diag(tr, np.zeros_like(rt1)), _set_diag(bl, np.zeros_like(rt1))
            tl, tr = _permute_cols(tl, tr)
            bl, br = _permute_cols(bl, br)
            tl, bl = _permute_rows(tl, bl)
            tr, br = _permute_rows(tr, br)
            v_tl, v_tr, v_bl, v_br = _over_rows(c, s, v_tl, v_tr, v_bl, v_br)
            v_tl, v_bl = _permute_rows(v_tl, v_bl)
            v_tr, v_br = _permute_rows(v_tr, v_br)
        it += 1
    w = np.concatenate([np.real(_diag(tl)), np.real(_diag(br))], axis=-1)[..., :n]
    v = np.concatenate([np.concatenate([v_tl, v_tr], axis=-1), np.concatenate([v_bl, v_br], axis=-1)],
                       axis=-2)[..., :n, :n]
    v = np.swapaxes(v, -1, -2)
    if dt.kind == "c":
        v = np.conj(v)
    if sort:
        order = np.argsort(w, axis=-1, kind="stable")
        w = np.take_along_axis(w, order, -1)
        v = np.take_along_axis(v, order[..., None, :], -1)
    return v.astype(dt), w.astype(rdt)


@target("Eigh")
def cc_eigh(inst, args, ec):
    """Hermitian eigendecomposition as XLA's EighExpander (Jacobi), backend_config
    "lower,sort_eigenvalues,max_iter,tol": (eigenvectors in columns, eigenvalues)."""
    if len(args) != 1:
        raise HloEvalError(f"Eigh takes one operand, got {len(args)}")
    a = np.asarray(args[0])
    _check_float(a, "Eigh")
    if a.shape[-1] != a.shape[-2]:
        raise HloEvalError(f"Eigh needs square matrices, got {a.dtype}{list(a.shape)}")
    real = np.dtype(np.float32 if a.dtype in (np.float32, np.complex64) else np.float64)
    _check_declared(inst, "Eigh", [(a.dtype, a.shape), (real, a.shape[:-1])])
    bc = inst.attrs.get("backend_config")
    text = (bc.string if hasattr(bc, "string") else str(bc or "")).strip()
    parts = text.split(",")
    try:
        lower, sort, max_iter, tol = int(parts[0]), int(parts[1]), int(parts[2]), float(parts[3])
        if len(parts) != 4:
            raise ValueError
    except (ValueError, IndexError):
        raise HloEvalError(f"Eigh's backend_config must be \"lower,sort_eigenvalues,max_iter,tol\" "
                           f"(e.g. \"1,1,100,0.000001\"), got {text!r}") from None
    with np.errstate(all="ignore"), blas_single():      # sums independent of the thread count
        return declared_result(inst, list(eigh_expanded(a, bool(lower), max_iter, tol, bool(sort))))
