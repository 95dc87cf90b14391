"""Custom-call targets that XLA CPU runs itself instead of calling a library: the dynamic-shape
conversions its emitter handles (`SliceToDynamic`, `PadToStatic`), the value-inference annotation
`SetBound`, and the targets XLA's own expanders lower (`Qr` and
`ProductOfElementaryHouseholderReflectors`, from XLA's builder library and TensorFlow's bridge,
expanded by QrExpander in XLA CPU's pipeline).

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

The arithmetic runs in the operand's type with XLA's dot (HIGHEST precision), so results agree
with XLA's to a few ulps and signs are XLA's.
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError
from .custom_call import _result, target
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
    return _result(inst, [out] + [np.array(n, np.int32) for n in x.shape])


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
    with np.errstate(all="ignore"):
        return _result(inst, list(qr_expanded(a)))


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
    with np.errstate(all="ignore"):
        return _result(inst, [householder_product(a, taus)])
