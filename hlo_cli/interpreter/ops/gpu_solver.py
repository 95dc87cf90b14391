"""jaxlib's GPU linear-algebra and random-number targets (cuSOLVER / hipSOLVER, cuBLAS / hipBLAS,
cuSPARSE / hipSPARSE and jaxlib's own kernels), run with the CPU LAPACK routines of custom_call.py.

Targets (CUDA spelling; the ROCm one swaps `cu` for `hip`, e.g. `hipsolver_potrf_ffi`,
`hip_lu_pivots_to_permutation`), with the operands and results jaxlib's FFI handlers
(jaxlib/gpu/solver_kernels_ffi.cc, prng_kernels, linalg_kernels, sparse) bind and the options of
their backend_config; T is the matrix's element type (f32, f64, c64, c128), R its real type, B
the batch dims, k = min(m, n):

  cusolver_potrf_ffi   {lower}                  a T[B,n,n] -> a, info s32[B]
  cusolver_getrf_ffi                            a T[B,m,n] -> a, ipiv s32[B,k] (1-based), info s32[B]
  cusolver_geqrf_ffi                            a T[B,m,n] -> a, tau T[B,k]
  cusolver_orgqr_ffi                            a T[B,m,n], tau T[B,t] -> a        (m >= n >= t)
  cusolver_ormqr_ffi   {left, transpose}        a, tau, c T[B,p,q] -> c
  cusolver_syevd_ffi   {algorithm, lower}       a T[B,n,n] -> v, w R[B,n] (ascending), info
  cusolver_sytrd_ffi   {lower}                  a T[B,n,n] -> a, d R[B,n], e R[B,n-1], tau T[B,n-1], info
  cusolver_gesvd_ffi   {full_matrices, compute_uv, transposed}
                                                a T[B,m,n] -> a, s R[B,k], u, vt, info
  cusolver_gesvdj_ffi / _gesvdp_ffi / _gesdd_ffi {full_matrices, compute_uv[, transposed]}
                                                a T[B,m,n] -> a, s R[B,k], u T[B,m,m|k], v T[B,n,n|k], info
                                                (gesvdj/gesvdp return V, not V^H; gesdd returns vt)
  cusolver_syrk_ffi    {transpose}              a T[B,r,c], c T[B,s,s], alpha T[], beta T[] -> c
  cusolver_geev_ffi    {left, right}            a T[B,n,n] -> a, w C[B,n], vl, vr T[B,n,n] (real: packed pairs), info
  cuhybrid_eig_real / _comp {magma, left, right} a T[B,n,n] -> (wr, wi | w), vl, vr C[B,n,n], info
  cusolver_csrlsvqr_ffi {tol, reorder}          data T[nnz], indices s32[nnz], indptr s32[n+1], b T[n] -> x T[n]
  cusparse_gtsv2_ffi                            dl, d, du T[B,m], b T[B,m,r] -> x T[B,m,r]
  cu_tridiagonal_solve_perturbed (and the CPU's tridiagonal_solve_perturbed_ffi)
                                                dl, d, du T[B,m], b T[B,m,r] -> x (singular pivots perturbed)
  cu_lu_pivots_to_permutation                   pivots s32[B,k] (0-based) -> permutation s32[B,p]
  cu_cholesky_update_ffi                        r T[n,n], w T[n] -> r', w' (rank-1 update, row-major)
  cu_threefry2x32_ffi (and legacy cu_threefry2x32)
                                                k0, k1, x0, x1 u32[S] -> y0, y1 u32[S]

Every call is checked first (operand and result element types and shapes against the rules
above, options against what the handler accepts): a mismatch is a located HloEvalError, never a
read past a buffer.  Matrices are read column-major, as jaxlib's GPU kernels read them (the
lowering asks XLA for column-major operand and result layouts; lapack_contract.to_kernel /
from_kernel reinterpret buffers laid out otherwise, the same rule as the CPU targets).

Numerics.  cuSOLVER's algorithms are not LAPACK's: syevd picks Jacobi (syevj, batched) for n <= 32
or algorithm=2, gesvdj is a Jacobi SVD, getrf/geqrf of many small matrices run cuBLAS's batched
kernels.  Where the result is unique (Cholesky, LU with partial pivoting, eigenvalues, singular
values, the tridiagonal solve, the Householder QR with LAPACK's reflector convention that
cuSOLVER shares) we reproduce it with LAPACK in the same precision: equal to rounding.  Where it
is not (the signs of eigenvectors and singular vectors), we return LAPACK's; the GPU's own signs
come from its iteration order and follow no rule we can reproduce (see the module notes in the
gpu-ffi report).  Unspecified outputs (gesvdj's u and v without compute_uv) are zeros.

Legacy (pre-FFI) cuSOLVER targets pass their sizes in an opaque descriptor; of those, only the
threefry kernel (whose operands carry everything) runs; the others are refused by name.
"""
from __future__ import annotations

import re
import struct

import numpy as np

from ...errors import HloEvalError
from . import custom_call as CC
from . import lapack_contract as LC
from .custom_call import target

_FLOATS = {np.dtype(np.float32): np.dtype(np.float32), np.dtype(np.float64): np.dtype(np.float64),
           np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
I32 = LC.I32
U32 = np.dtype(np.uint32)


def _fail(inst, msg):
    raise HloEvalError(f"custom-call target '{inst.attrs.get('custom_call_target')}': {msg}")


def _elem(inst, x, role="the matrix operand"):
    """The element type T of a call (its main operand's), which must be one cuSOLVER computes in."""
    dt = np.asarray(x).dtype
    if dt not in _FLOATS:
        _fail(inst, f"{role} must be f32, f64, c64 or c128, got {LC.txt(dt, np.shape(x))}")
    return dt


def _bool(inst, attrs, key, default=None) -> bool:
    if key not in attrs:
        if default is None:
            _fail(inst, f"backend_config must set '{key}' (a bool), got {sorted(attrs) or 'no options'}")
        return default
    v = attrs[key]
    if isinstance(v, bool) or v in (0, 1):
        return bool(v)
    _fail(inst, f"backend_config option '{key}' must be a bool, got {v!r}")
    raise AssertionError


def _count(inst, args, n):
    if len(args) != n:
        _fail(inst, f"takes {n} operand{'s' if n != 1 else ''}, got {len(args)}")


def _run(inst, args, contract, compute):
    """Check the call against its contract, hand the kernel its column-major view of the
    operands, and lay the kernel's results out as declared."""
    LC.check(inst, args, contract)
    outs = compute(LC.to_kernel(inst, args, contract))
    value = CC.declared_result(inst, outs)
    return LC.from_kernel(inst, value, contract)


def _M(role, dt, dims):
    return LC.Slot(role, dt, tuple(dims), True)


def _V(role, dt, dims):
    return LC.Slot(role, dt, tuple(dims))


def _square(inst, x, name):
    B, m, n = LC.batched_matrix(inst, x, "the matrix operand")
    if m != n:
        _fail(inst, f"{name} takes square matrices; the matrix operand is {LC.txt(x.dtype, x.shape)}")
    return B, n


def _one_square(inst, args, name):
    """(backend_config, T, batch dims, n, lower) of a call on one batch of square matrices."""
    at = CC.backend_attrs(inst)
    _count(inst, args, 1)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    B, n = _square(inst, a, name)
    return at, T, B, n, _bool(inst, at, "lower", True)


# ============================================================================ cuSOLVER

_GPU = r"(?:cu|hip)"


@target(pattern=rf"{_GPU}solver_potrf_ffi")
def gpu_potrf(inst, args, ec):
    """Cholesky factor in the `lower` (or upper) triangle, the other triangle unchanged; info > 0
    is the order of the first minor that is not positive definite."""
    at, T, B, n, lower = _one_square(inst, args, "potrf")
    c = LC.Contract((_M("the matrix", T, B + (n, n)),),
                    (_M("the factor", T, B + (n, n)), _V("info", I32, B)))
    return _run(inst, args, c, lambda k: list(CC.potrf(k[0], lower)))


@target(pattern=rf"{_GPU}solver_getrf_ffi")
def gpu_getrf(inst, args, ec):
    """LU with partial pivoting (cuSOLVER getrf, or cuBLAS getrfBatched for many small matrices):
    (L\\U, 1-based s32 pivots, info = first zero pivot's 1-based index)."""
    _count(inst, args, 1)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    B, m, n = LC.batched_matrix(inst, a, "the matrix operand")
    k = min(m, n)
    c = LC.Contract((_M("the matrix", T, B + (m, n)),),
                    (_M("the LU factors", T, B + (m, n)), _V("the pivots", I32, B + (k,)), _V("info", I32, B)))
    return _run(inst, args, c, lambda kk: list(CC.getrf(kk[0])))


@target(pattern=rf"{_GPU}solver_geqrf_ffi")
def gpu_geqrf(inst, args, ec):
    """Householder QR (LAPACK's reflector convention): (R above / reflectors below the diagonal, tau)."""
    _count(inst, args, 1)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    B, m, n = LC.batched_matrix(inst, a, "the matrix operand")
    c = LC.Contract((_M("the matrix", T, B + (m, n)),),
                    (_M("the QR factors", T, B + (m, n)), _V("tau", T, B + (min(m, n),))))
    return _run(inst, args, c, lambda kk: list(CC.geqrf(kk[0])))


@target(pattern=rf"{_GPU}solver_orgqr_ffi")
def gpu_orgqr(inst, args, ec):
    """The first n columns of Q = H(1) ... H(t) from geqrf's reflectors."""
    _count(inst, args, 2)
    a, tau = np.asarray(args[0]), np.asarray(args[1])
    T = _elem(inst, a)
    B, m, n = LC.batched_matrix(inst, a, "the reflectors operand")
    if tau.ndim != len(B) + 1:
        _fail(inst, f"tau must be {LC.txt(T, B + ('t',))}, got {LC.txt(tau.dtype, tau.shape)}")
    t = tau.shape[-1]
    if not m >= n >= t:
        _fail(inst, f"orgqr needs rows >= columns >= reflectors (m >= n >= t), got m = {m}, n = {n}, t = {t}")
    c = LC.Contract((_M("the reflectors", T, B + (m, n)), _V("tau", T, B + (t,))),
                    (_M("q", T, B + (m, n)),))
    return _run(inst, args, c, lambda kk: [CC.orgqr(kk[0], kk[1])])


@target(pattern=rf"{_GPU}solver_ormqr_ffi")
def gpu_ormqr(inst, args, ec):
    """c multiplied by Q (or Q^H) from geqrf's reflectors, on the left or the right."""
    at = CC.backend_attrs(inst)
    _count(inst, args, 3)
    a, tau, cc = (np.asarray(v) for v in args)
    T = _elem(inst, cc, "c")
    left, trans = _bool(inst, at, "left", True), _bool(inst, at, "transpose", False)
    B, m, n = LC.batched_matrix(inst, cc, "c")
    r = m if left else n
    if a.ndim != len(B) + 2 or tau.ndim != len(B) + 1:
        _fail(inst, f"takes a {LC.txt(T, B + ('r', 'k'))}, tau {LC.txt(T, B + ('k',))} and c {LC.txt(T, B + (m, n))}; "
                    f"got a {LC.txt(a.dtype, a.shape)}, tau {LC.txt(tau.dtype, tau.shape)}")
    kk = tau.shape[-1]
    if kk > r or a.shape[-1] < kk or a.shape[-2] != r:
        _fail(inst, f"ormqr applies k = {kk} reflectors of length {r} ({'rows' if left else 'columns'} of c "
                    f"{LC.txt(cc.dtype, cc.shape)}); a is {LC.txt(a.dtype, a.shape)}")
    c = LC.Contract((_M("the reflectors", T, B + (r, a.shape[-1])), _V("tau", T, B + (kk,)), _M("c", T, B + (m, n))),
                    (_M("the product", T, B + (m, n)),))
    return _run(inst, args, c, lambda k: [CC.ormqr(k[0], k[1], k[2], left, trans)])


_SYEVD_ALGORITHMS = {0: "default (Jacobi for n <= 32, else QR)", 1: "QR", 2: "Jacobi"}


@target(pattern=rf"{_GPU}solver_syevd_ffi")
def gpu_syevd(inst, args, ec):
    """Symmetric / Hermitian eigendecomposition of the `lower` (or upper) triangle: (eigenvectors in
    the columns, eigenvalues ascending, info).  Every algorithm (syevd, syevj, syevjBatched) gives
    the same eigenvalues to rounding; eigenvector signs are the library's choice."""
    at, T, B, n, lower = _one_square(inst, args, "syevd")
    alg = int(at.get("algorithm", 0))
    if alg not in _SYEVD_ALGORITHMS:
        _fail(inst, f"backend_config 'algorithm' must be 0 (default), 1 (QR) or 2 (Jacobi), got {alg}")
    c = LC.Contract((_M("the matrix", T, B + (n, n)),),
                    (_M("the eigenvectors", T, B + (n, n)), _V("the eigenvalues", _FLOATS[T], B + (n,)),
                     _V("info", I32, B)))
    return _run(inst, args, c, lambda k: list(CC.syevd(k[0], "V", "L" if lower else "U")))


@target(pattern=rf"{_GPU}solver_sytrd_ffi")
def gpu_sytrd(inst, args, ec):
    """Householder reduction of a symmetric / Hermitian matrix to tridiagonal form:
    (a with the reflectors, diagonal, off-diagonal, tau, info)."""
    at, T, B, n, lower = _one_square(inst, args, "sytrd")
    R, n1 = _FLOATS[T], max(n - 1, 0)
    c = LC.Contract((_M("the matrix", T, B + (n, n)),),
                    (_M("the tridiagonal form", T, B + (n, n)), _V("the diagonal", R, B + (n,)),
                     _V("the off-diagonal", R, B + (n1,)), _V("tau", T, B + (n1,)), _V("info", I32, B)))
    return _run(inst, args, c, lambda k: list(CC.sytrd(k[0], "L" if lower else "U")))


def _as_buffer(x: np.ndarray, dims) -> np.ndarray:
    """The column-major buffer of matrices x (batch-major) read as matrices of `dims` (the same
    elements, per batch, in the same column-major order)."""
    dims = tuple(dims)
    B = dims[:-2]
    flat = np.asarray(x).reshape((-1,) + x.shape[-2:])
    per = [np.reshape(np.ravel(mat, order="F"), dims[-2:], order="F") for mat in flat]
    return np.array(per, x.dtype).reshape(B + dims[-2:])


@target(pattern=rf"{_GPU}solver_(gesvd|gesvdj|gesvdp|gesdd)_ffi")
def gpu_gesvd(inst, args, ec):
    """Singular value decomposition: (a as the library leaves it, singular values descending, u,
    vt for gesvd / gesdd or v for the Jacobi and polar kernels, info).  `transposed` (gesvd with
    m < n) means the kernel factors the buffer read as the n x m matrix a^T, so its u slot holds
    vt^H of a and its vt slot u^H (the lowering swaps them back)."""
    at = CC.backend_attrs(inst)
    name = inst.attrs.get("custom_call_target", "")
    routine = re.search(r"solver_(\w+?)_ffi", name).group(1)
    _count(inst, args, 1)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    R = _FLOATS[T]
    B, m, n = LC.batched_matrix(inst, a, "the matrix operand")
    full = _bool(inst, at, "full_matrices", True)
    uv = _bool(inst, at, "compute_uv", True)
    transposed = _bool(inst, at, "transposed", False) if routine in ("gesvd", "gesdd") else False
    if transposed and routine == "gesdd":
        _fail(inst, "gesdd takes transposed = false")
    km, kn = (n, m) if transposed else (m, n)          # the problem the kernel solves
    k = min(m, n)
    ucols, vcols = (km, kn) if full else (k, k)
    jacobi = routine in ("gesvdj", "gesvdp")
    leaves = CC.leaf_shapes(inst.shape)
    if len(leaves) != 5:
        _fail(inst, f"returns 5 results (a, s, u, v, info), the declared shape {inst.shape.to_str(False)} has "
                    f"{len(leaves)}")
    if jacobi or uv:
        u_dims = B + (km, ucols)
        v_dims = B + ((kn, vcols) if jacobi else (vcols, kn))
        if transposed:          # declared as a's vt and u, row-major: the buffers of u^T and vt^T
            u_dims, v_dims = B + (ucols, km), B + (kn, vcols)
        u_slot, v_slot = _M("u", T, u_dims), _M("v" if jacobi else "vt", T, v_dims)
    else:                       # gesvd without vectors: jaxlib's placeholders, not touched
        u_slot = LC.Slot("u", T, None, True, len(leaves[2].dims))
        v_slot = LC.Slot("vt", T, None, True, len(leaves[3].dims))
    c = LC.Contract((_M("the matrix", T, B + (m, n)),),
                    (_M("the overwritten matrix", T, B + (m, n)), _V("the singular values", R, B + (k,)),
                     u_slot, v_slot, _V("info", I32, B)))

    def compute(kern):
        x = kern[0]
        if transposed:
            x = _as_buffer(x, B + (km, kn))
        mode = ("A" if full else "S") if (uv or jacobi) else "N"
        aout, s, u, vt, info = CC.gesvd_family(x, mode, "gesvd")
        if transposed:
            aout = _as_buffer(aout, B + (m, n))
        if mode == "N":
            return [aout, s, None, None, info]
        if jacobi:
            vt = np.conj(np.swapaxes(vt, -1, -2))
        if transposed:
            u, vt = _as_buffer(u, u_dims), _as_buffer(vt, v_dims)
        return [aout, s, u, vt, info]
    return _run(inst, args, c, compute)


@target(pattern=rf"{_GPU}solver_syrk_ffi")
def gpu_syrk(inst, args, ec):
    """Symmetric rank-k update c_out = alpha a a^T + beta c (transpose: alpha a^T a + beta c), with
    a and c read row-major as jaxlib lowers them: only the lower triangle (cuBLAS's upper one,
    column-major) is written, the strict upper triangle keeps c's values."""
    at = CC.backend_attrs(inst)
    _count(inst, args, 4)
    a, cc, alpha, beta = (np.asarray(v) for v in args)
    T = _elem(inst, a)
    trans = _bool(inst, at, "transpose", False)
    B, r, cols = LC.batched_matrix(inst, a, "a")
    s = cols if trans else r
    c = LC.Contract((_V("a", T, B + (r, cols)), _V("c", T, B + (s, s)), _V("alpha", T, ()), _V("beta", T, ())),
                    (_V("the updated c", T, B + (s, s)),))

    def compute(k):
        a_, c_, al, be = k
        op = np.swapaxes(a_, -1, -2) if trans else a_
        prod = np.matmul(op, np.swapaxes(op, -1, -2))
        with np.errstate(all="ignore"):
            upd = (al * prod + be * c_).astype(T)
        low = np.tril(np.ones((s, s), bool))
        return [np.where(low, upd, c_)]
    return _run(inst, args, c, compute)


@target(pattern=rf"{_GPU}solver_csrlsvqr_ffi")
def gpu_csrlsvqr(inst, args, ec):
    """Solve A x = b for a square sparse A in CSR form (data, column indices, row pointers) by QR
    (jax.experimental.sparse.linalg.spsolve on a GPU).  A singular A (within tol) gives the
    library's least-squares-like garbage on the GPU; here the QR solution, inf/NaN where R has a
    zero pivot."""
    at = CC.backend_attrs(inst)
    _count(inst, args, 4)
    data, indices, indptr, b = (np.asarray(v) for v in args)
    T = _elem(inst, b, "b")
    if b.ndim != 1:
        _fail(inst, f"b must be a vector, got {LC.txt(b.dtype, b.shape)}")
    n = b.shape[0]
    nnz = data.shape[0] if data.ndim == 1 else -1
    c = LC.Contract((_V("data", T, (nnz,)), _V("indices", I32, (nnz,)), _V("indptr", I32, (n + 1,)), _V("b", T, (n,))),
                    (_V("x", T, (n,)),))
    reorder = int(at.get("reorder", 0))
    if reorder not in (0, 1, 2, 3):
        _fail(inst, f"backend_config 'reorder' must be 0..3 (none, symrcm, symamd, csrmetisnd), got {reorder}")
    LC.check(inst, args, c)
    if n and (indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != nnz):
        _fail(inst, f"indptr must rise from 0 to nnz = {nnz}, got {indptr.tolist()[:8]}")
    if nnz and (indices.min() < 0 or indices.max() >= n):
        _fail(inst, f"column indices must lie in [0, {n}), got values from {indices.min()} to {indices.max()}")
    dense = np.zeros((n, n), T)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    np.add.at(dense, (rows, indices), data)
    qr, tau = CC.geqrf(dense)
    qtb = CC.ormqr(qr, tau, b.reshape(n, 1).astype(T), True, True)
    with np.errstate(all="ignore"):
        x = CC.trsm(np.triu(qr), qtb, "L", "U", "N", "N")
    return x.reshape(n).astype(T)


def _pack_pairs(wi, v):
    """LAPACK's real storage of complex eigenvectors (xGEEV's): a conjugate pair (wi[j] > 0 first)
    as the real part in column j and the imaginary part in column j + 1."""
    out = v.real.copy()
    n = v.shape[-1]
    if n < 2 or out.size == 0:
        return out
    first = np.asarray(wi).reshape(-1, n)[:, :-1] > 0        # the first of a pair has wi > 0
    b, j = np.nonzero(first)
    flat_out = out.reshape((-1, n, n))
    flat_out[b, :, j + 1] = v.reshape((-1, n, n))[b, :, j].imag
    return out


def _geev(inst, args, routine):
    at, T, B, n, _ = _one_square(inst, args, routine)
    left, right = _bool(inst, at, "left", False), _bool(inst, at, "right", True)
    return at, np.asarray(args[0]), T, B, n, left, right, np.result_type(T, np.complex64)


@target(pattern=rf"{_GPU}solver_geev_ffi")
def gpu_geev(inst, args, ec):
    """cuSOLVER's Xgeev (jnp.linalg.eig on CUDA >= 11.7.1, right eigenvectors): (a as the library
    leaves it, complex eigenvalues, vl, vr in the input's type, info); a real input's eigenvectors
    in LAPACK's packed form (a conjugate pair as real and imaginary columns), which JAX unpacks."""
    at, a, T, B, n, left, right, C = _geev(inst, args, "geev")
    mat = lambda role, dt: _M(role, dt, B + (n, n))                 # noqa: E731
    c = LC.Contract((mat("the matrix", T),), (mat("the overwritten matrix", T), _V("the eigenvalues", C, B + (n,)),
                                             mat("vl", T), mat("vr", T), _V("info", I32, B)))

    def compute(k):
        out = CC.geev(k[0], "V" if left else "N", "V" if right else "N")
        if T.kind == "c":
            w, vl, vr, info = out
        else:
            wr, wi, vl, vr, info = out
            w = wr + 1j * wi
            vl, vr = _pack_pairs(wi, vl), _pack_pairs(wi, vr)
        return [None, w, vl if left else None, vr if right else None, info]
    return _run(inst, args, c, compute)


@target(pattern=rf"{_GPU}hybrid_eig_(real|comp)")
def gpu_hybrid_eig(inst, args, ec):
    """jaxlib's hybrid eigensolver (MAGMA's or LAPACK's geev on the host; jnp.linalg.eig on GPUs
    without cuSOLVER's Xgeev, and whenever left eigenvectors are asked): real input (wr, wi, vl, vr,
    info), complex input (w, vl, vr, info), eigenvectors complex."""
    at, a, T, B, n, left, right, C = _geev(inst, args, "eig")
    real = inst.attrs.get("custom_call_target", "").endswith("real")
    if real != (T.kind != "c"):
        _fail(inst, f"the {'real' if real else 'complex'} kernel takes a {'real' if real else 'complex'} matrix, "
                    f"got {LC.txt(a.dtype, a.shape)}")
    mag = at.get("magma", "auto")
    if mag not in ("auto", "on", "off"):
        _fail(inst, f"backend_config 'magma' must be \"auto\", \"on\" or \"off\", got {mag!r}")
    vals = (_V("wr", T, B + (n,)), _V("wi", T, B + (n,))) if real else (_V("w", T, B + (n,)),)
    c = LC.Contract((_M("the matrix", T, B + (n, n)),),
                    vals + (_M("vl", C, B + (n, n)), _M("vr", C, B + (n, n)), _V("info", I32, B)))
    return _run(inst, args, c, lambda k: list(CC.geev(k[0], "V" if left else "N", "V" if right else "N")))


# ============================================================================ cuSPARSE, jaxlib kernels

@target(pattern=rf"{_GPU}sparse_gtsv2_ffi")
def gpu_gtsv2(inst, args, ec):
    """Tridiagonal solve (cuSPARSE gtsv2, partial pivoting) of each system, dl[0] and du[m-1]
    unused: x with the column-major right-hand sides b."""
    c, *_ = _tridiagonal_contract(inst, args)
    return _run(inst, args, c, lambda k: [CC.gtsv(*k)[3]])


def _tridiagonal_contract(inst, args):
    """(contract, T, B, n, r) of a tridiagonal solve: dl, d, du T[B,n] and b T[B,n,r] -> x T[B,n,r]."""
    _count(inst, args, 4)
    b = np.asarray(args[3])
    T = _elem(inst, b, "b")
    B, n, r = LC.batched_matrix(inst, b, "b")
    diag = lambda role: _V(role, T, B + (n,))            # noqa: E731
    c = LC.Contract((diag("dl"), diag("d"), diag("du"), _M("b", T, B + (n, r))), (_M("x", T, B + (n, r)),))
    return c, T, B, n, r


def _perturb_pivot(perturb, pivot, rows):
    """Per system (vectorized): nudge a pivot smaller than 1 away from zero until neither 1 / pivot
    nor rows / pivot overflows (LAPACK xLAGTS's safeguard, as jaxlib's perturbed solver applies it):
    add the perturbation (with the pivot's sign, doubling it each time) or, for a tiny pivot that
    allows it, scale pivot and row by 1 / safemin.  Updates pivot and rows in place."""
    real = np.finfo(rows.dtype).dtype
    tiny, small = np.finfo(real).tiny, real.type(1) / np.finfo(real).max
    safemin = tiny if small < tiny else small * (1 + np.finfo(real).eps)
    bignum = real.type(1) / safemin
    absp = np.abs(pivot)
    perturb = np.copysign(np.maximum(np.abs(perturb), safemin), pivot.real).astype(real)
    big = np.abs(rows).max(axis=-1) if rows.shape[-1] else np.zeros(absp.shape, real)
    go = absp < 1
    while go.any():
        low = go & (absp < safemin)
        grow_low = low & ((absp == 0) | (big * safemin > absp))
        scale = low & ~grow_low
        grow = grow_low | (go & ~low & (big > absp * bignum))
        pivot[grow] += perturb[grow]
        perturb[grow] *= 2
        pivot[scale] *= bignum
        rows[scale] *= bignum
        absp = np.abs(pivot)
        go = grow & (absp < 1)


@target("tridiagonal_solve_perturbed_ffi", pattern=rf"{_GPU}_tridiagonal_solve_perturbed")
def tridiagonal_solve_perturbed(inst, args, ec):
    """jax.lax.linalg.tridiagonal_solve(..., perturb_singular=True) (jaxlib's CPU and GPU kernels):
    Gaussian elimination with partial pivoting (LAPACK xLAGTF + xLAGTS, forward solve fused), whose
    pivots, when the matrix is numerically singular, are perturbed by eps * max|U| (doubling) so that
    the back substitution does not overflow; dl[0] and du[n-1] unused.  Vectorized over the batch."""
    c, T, B, n, r = _tridiagonal_contract(inst, args)

    def compute(k):
        dl, d, du = (np.asarray(v, T).reshape(-1, n) for v in k[:3])
        rhs = np.asarray(k[3], T).reshape(-1, n, r)
        return [_perturbed_solve(dl, d, du, rhs).reshape(B + (n, r))]
    return _run(inst, args, c, compute)


def _perturbed_solve(dl, d, du, rhs):
    m, n = d.shape
    T = d.dtype
    eps = np.finfo(T).eps
    x = rhs.copy()
    if n == 0:
        return x
    with np.errstate(all="ignore"):
        if n == 1:
            p = d[:, 0].copy()
            row = rhs[:, 0].copy()
            _perturb_pivot(eps * np.abs(p), p, row)
            x[:, 0] = row / p[:, None]
            return x
        u0, u1, u2 = np.zeros((m, n), T), np.zeros((m, n), T), np.zeros((m, n), T)
        u0[:, 0], u1[:, 0] = d[:, 0], du[:, 0]
        top = np.maximum(np.abs(u0[:, 0]), np.abs(u1[:, 0]))
        scale1 = np.abs(u0[:, 0]) + np.abs(u1[:, 0])
        for k in range(n - 1):
            last = k == n - 2
            u0[:, k + 1] = d[:, k + 1]
            scale2 = np.abs(dl[:, k + 1]) + np.abs(u0[:, k + 1]) + (0 if last else np.abs(du[:, k + 1]))
            zero = dl[:, k + 1] == 0
            piv1 = np.where(u0[:, k] == 0, 0, np.abs(u0[:, k]) / scale1)
            piv2 = np.abs(dl[:, k + 1]) / scale2
            keep = ~zero & (piv2 <= piv1)                  # eliminate without a row swap
            swap = ~zero & ~keep
            f_keep = np.where(keep, dl[:, k + 1] / u0[:, k], 0)[:, None]
            f_swap = np.where(swap, u0[:, k] / dl[:, k + 1], 0)
            uk1 = u1[:, k].copy()
            xk = x[:, k].copy()
            new_u0 = np.where(keep, u0[:, k + 1] - f_keep[:, 0] * u1[:, k], uk1 - f_swap * d[:, k + 1])
            u0[:, k + 1] = np.where(zero, u0[:, k + 1], new_u0)
            u1[:, k + 1] = np.where(swap, 0 if last else -f_swap * du[:, k + 1], du[:, k + 1])
            u2[:, k] = np.where(swap & (not last), du[:, k + 1] if not last else 0, 0)
            u0[:, k] = np.where(swap, dl[:, k + 1], u0[:, k])
            u1[:, k] = np.where(swap, d[:, k + 1], u1[:, k])
            sw = swap[:, None]
            x[:, k + 1] = np.where(zero[:, None], rhs[:, k + 1],
                                   np.where(sw, xk - f_swap[:, None] * rhs[:, k + 1], rhs[:, k + 1] - f_keep * xk))
            x[:, k] = np.where(sw, rhs[:, k + 1], xk)
            scale1 = np.where(swap, np.abs(u0[:, k + 1]) + np.abs(u1[:, k + 1]), scale2)
            if not last:
                top = np.maximum.reduce([top, np.abs(u0[:, k]), np.abs(u1[:, k]), np.abs(u2[:, k])])
        top = np.maximum(top, np.abs(u0[:, n - 1]))
        perturb = (eps * top).astype(np.finfo(T).dtype)
        one = T.type(1)
        for k in range(n - 1, -1, -1):
            p = u0[:, k].copy()
            row = x[:, k].copy()
            if k <= n - 2:
                row -= u1[:, k, None] * x[:, k + 1]
            if k <= n - 3:
                row -= u2[:, k, None] * x[:, k + 2]
            _perturb_pivot(perturb if k == n - 1 else np.copysign(perturb, p.real), p, row)
            x[:, k] = row * (one / p)[:, None]
    return x


@target(pattern=rf"{_GPU}_lu_pivots_to_permutation")
def gpu_lu_pivots_to_permutation(inst, args, ec):
    """The permutation that LU's row swaps make: start from iota(p) and swap entries i and
    pivots[i] for i = 0..k-1 in order (0-based pivots; a pivot outside [0, p) swaps nothing)."""
    _count(inst, args, 1)
    piv = np.asarray(args[0])
    if piv.dtype != I32 or piv.ndim < 1:
        _fail(inst, f"pivots must be s32[..., k], got {LC.txt(piv.dtype, piv.shape)}")
    B, k = piv.shape[:-1], piv.shape[-1]
    out = inst.shape
    if out.is_tuple or CC.np_dtype(out) != I32 or tuple(out.dims[:-1]) != B or len(out.dims) != piv.ndim \
            or out.dims[-1] < k:
        _fail(inst, f"returns s32{list(B) + ['p']} with p >= {k} (the pivots' length), the declared shape is "
                    f"{out.to_str(False)}")
    return pivots_to_permutation(piv, out.dims[-1])


def pivots_to_permutation(piv: np.ndarray, p: int) -> np.ndarray:
    """s32[..., p]: iota(p) after swapping entries i and piv[..., i] for i = 0..k-1 in order."""
    B, k = piv.shape[:-1], piv.shape[-1]
    flat = piv.reshape(-1, k)
    perm = np.broadcast_to(np.arange(p, dtype=np.int32), (flat.shape[0], p)).copy()
    rows = np.arange(flat.shape[0])
    for i in range(min(k, p)):               # k sequential swaps, vectorized over the batch
        j = flat[:, i]
        ok = (j >= 0) & (j < p)
        r, jj = rows[ok], j[ok]
        a, bb = perm[r, i].copy(), perm[r, jj].copy()
        perm[r, i], perm[r, jj] = bb, a
    return perm.reshape(B + (p,))


@target("LuDecomposition")
def tpu_lu(inst, args, ec):
    """The TPU's LU with partial pivoting (jax.lax.linalg.lu recorded on a TPU): (L\\U of the row-major
    matrix, 0-based s32 pivots, the s32 permutation they make)."""
    _count(inst, args, 1)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    B, m, n = LC.batched_matrix(inst, a, "the matrix operand")
    k = min(m, n)
    want = (LC.txt(T, B + (m, n)), LC.txt(I32, B + (k,)), LC.txt(I32, B + (m,)))
    leaves = CC.leaf_shapes(inst.shape)
    got = tuple(LC.txt(CC.np_dtype(s), tuple(s.dims)) for s in leaves) if inst.shape.is_tuple else ()
    if got != want:
        _fail(inst, f"returns ({', '.join(want)}), the declared shape is {inst.shape.to_str(False)}")
    lu, piv, _ = CC.getrf(a)
    piv = piv - 1
    return (lu, piv, pivots_to_permutation(piv, m))


@target(pattern=rf"{_GPU}_cholesky_update_ffi")
def gpu_cholesky_update(inst, args, ec):
    """Rank-1 update of a Cholesky factor (jax.lax.linalg.cholesky_update on CUDA): upper-triangular
    R (A = R^T R) and w give R' with R'^T R' = A + w w^T, by one Givens rotation per row (row k
    against w, zeroing w[k]); results (R', the rotated w).  Row-major operands, computed in their
    type, in the order of JAX's reference algorithm."""
    _count(inst, args, 2)
    r, w = np.asarray(args[0]), np.asarray(args[1])
    if r.dtype not in (np.float32, np.float64) or r.ndim != 2 or r.shape[0] != r.shape[1] or w.shape != r.shape[:1] \
            or w.dtype != r.dtype:
        _fail(inst, f"takes a square f32/f64 matrix and a vector of its size and type, got {LC.txt(r.dtype, r.shape)} "
                    f"and {LC.txt(w.dtype, w.shape)}")
    n = r.shape[0]
    c = LC.Contract((_V("r", r.dtype, (n, n)), _V("w", r.dtype, (n,))), (_V("r", r.dtype, (n, n)), _V("w", r.dtype, (n,))))
    LC.check(inst, args, c)
    r, z = r.copy(), w.copy()
    with np.errstate(all="ignore"):
        for k in range(n):
            x, y = r[k, k], z[k]
            if y == 0:
                cs, sn = r.dtype.type(1), r.dtype.type(0)
            else:
                den = max(abs(x), abs(y))
                xs, ys = x / den, y / den
                rh = r.dtype.type(1) / np.sqrt(xs * xs + ys * ys)
                cs, sn = xs * rh, -ys * rh
            row = r[k].copy()
            r[k] = cs * row - sn * z
            z = cs * z + sn * row
    return (r, z)


@target(pattern=rf"{_GPU}_threefry2x32(_ffi)?")
def gpu_threefry2x32(inst, args, ec):
    """Threefry-2x32 (20 rounds) of (x0, x1) under the key (k0, k1), elementwise over operands of
    one shape: the same bits as XLA's threefry and jax.random's CPU lowering."""
    from .rng import threefry2x32
    _count(inst, args, 4)
    xs = [np.asarray(v) for v in args]
    shape = xs[0].shape
    for i, x in enumerate(xs):
        if x.dtype != U32 or x.shape != shape:
            _fail(inst, f"operand {i} must be {LC.txt(U32, shape)} (k0, k1, x0, x1 of one shape), got "
                        f"{LC.txt(x.dtype, x.shape)}")
    leaves = CC.leaf_shapes(inst.shape)
    if len(leaves) != 2 or any(CC.np_dtype(s) != U32 or tuple(s.dims) != shape for s in leaves):
        _fail(inst, f"returns two {LC.txt(U32, shape)}, the declared shape is {inst.shape.to_str(False)}")
    y0, y1 = threefry2x32(xs[2], xs[3], xs[0], xs[1])
    return (np.asarray(y0, U32).reshape(shape), np.asarray(y1, U32).reshape(shape))


# ============================================================================ legacy (opaque descriptors)
# jaxlib before the FFI passed a packed C struct as backend_config (native byte order, natural
# alignment); the leading fields give the element type (0 f32, 1 f64, 2 c64, 3 c128), the
# triangle (CUDA's fill mode 0 lower / 1 upper, hipSOLVER's and rocBLAS's 122 lower / 121 upper)
# and the sizes, which must equal the operand's.  Results are the FFI ones plus workspace buffers
# (zeros here).  Layouts:
#   potrf   {type, uplo, int64 batch, int64 n, lwork}
#   getrf   {type, batch, m, n[, lwork]}       geqrf {type, batch, m, n, lwork}
#   orgqr   {type, batch, m, n, k, lwork}      syevd / syevj {type, uplo, batch, n, lwork}
#   gesvd   {type, batch, m, n, lwork, char jobu, char jobvt}
#   gesvdj  {type, batch, m, n, lwork, jobz (0 no vectors, 1 vectors)[, econ]}
#   cublas_getrf_batched {type, batch, n}       cublas_geqrf_batched {type, batch, m, n} (results:
#   a, tau and two pointer workspaces, no info)


_TYPE_CODES = {0: np.dtype(np.float32), 1: np.dtype(np.float64), 2: np.dtype(np.complex64),
               3: np.dtype(np.complex128)}
_LOWER = {0: True, 1: False, 122: True, 121: False}
_LAYOUTS = {"potrf": ("iiqqi", ("type", "uplo", "batch", "n")), "getrf": ("iiii", ("type", "batch", "m", "n")),
            "geqrf": ("iiii", ("type", "batch", "m", "n")), "orgqr": ("iiiii", ("type", "batch", "m", "n", "k")),
            "syevd": ("iiii", ("type", "uplo", "batch", "n")), "syevj": ("iiii", ("type", "uplo", "batch", "n")),
            "gesvd": ("iiiiibb", ("type", "batch", "m", "n", "lwork", "jobu", "jobvt")),
            "gesvdj": ("iiiiii", ("type", "batch", "m", "n", "lwork", "jobz")),
            "getrf_batched": ("iii", ("type", "batch", "n")), "geqrf_batched": ("iiii", ("type", "batch", "m", "n"))}


def _descriptor(inst, routine) -> dict:
    fmt, names = _LAYOUTS[routine]
    bc = inst.attrs.get("backend_config")
    raw = (bc.string if hasattr(bc, "string") else str(bc or "")).encode("latin-1", "replace")
    size = struct.calcsize("@" + fmt)
    if len(raw) < size:
        _fail(inst, f"the legacy {routine} kernel reads a {size}-byte descriptor from backend_config "
                    f"({', '.join(names)}), got {len(raw)} bytes")
    return dict(zip(names, struct.unpack_from("@" + fmt, raw)))


@target(pattern=rf"{_GPU}solver_(potrf|getrf|geqrf|orgqr|syevd|syevj|gesvd|gesvdj)|{_GPU}blas_(getrf|geqrf)_batched")
def gpu_legacy_solver(inst, args, ec):
    """The pre-FFI cuSOLVER / hipSOLVER / cuBLAS-batched kernels: the FFI semantics, options and
    sizes from the opaque descriptor (checked against the operands), workspaces as extra results."""
    name = inst.attrs.get("custom_call_target", "")
    m_ = re.fullmatch(rf"{_GPU}(?:solver_(\w+)|blas_(\w+)_batched)", name)
    routine = m_.group(1) or (m_.group(2) + "_batched")
    d = _descriptor(inst, routine)
    nops = 2 if routine == "orgqr" else 1
    _count(inst, args, nops)
    a = np.asarray(args[0])
    T = _elem(inst, a)
    if _TYPE_CODES.get(d["type"]) != T:
        _fail(inst, f"the descriptor's element type code {d['type']} does not match the operand "
                    f"{LC.txt(a.dtype, a.shape)}")
    B, m, n = LC.batched_matrix(inst, a, "the matrix operand")
    batch = int(np.prod(B, dtype=np.int64))
    sizes = {"batch": batch, "m": m, "n": n}
    if routine == "orgqr":
        sizes["k"] = np.shape(args[1])[-1] if np.ndim(args[1]) else -1
    for key, want in sizes.items():
        if key in d and d[key] != want:
            _fail(inst, f"the descriptor's {key} is {d[key]}, the operands have {key} = {want}")
    if "uplo" in d and d["uplo"] not in _LOWER:
        _fail(inst, f"the descriptor's fill mode {d['uplo']} is neither lower nor upper")
    lower = _LOWER.get(d.get("uplo"), True)
    k = min(m, n)
    R = _FLOATS[T]
    M = lambda role, dims: _M(role, T, B + dims)                 # noqa: E731
    info = _V("info", I32, B)
    base = routine.replace("_batched", "")
    if base == "potrf":
        main, fn = (M("the factor", (n, n)), info), lambda kk: list(CC.potrf(kk[0], lower))
    elif base == "getrf":
        main, fn = (M("the LU factors", (m, n)), _V("the pivots", I32, B + (k,)), info), lambda kk: list(CC.getrf(kk[0]))
    elif routine == "geqrf_batched":                               # cuBLAS's: no info result
        main, fn = (M("the QR factors", (m, n)), _V("tau", T, B + (k,))), lambda kk: list(CC.geqrf(kk[0]))
    elif base == "geqrf":
        main = (M("the QR factors", (m, n)), _V("tau", T, B + (k,)), info)
        fn = lambda kk: list(CC.geqrf(kk[0])) + [np.zeros(B, np.int32)]           # noqa: E731
    elif base == "orgqr":
        main, fn = (M("q", (m, n)), info), lambda kk: [CC.orgqr(kk[0], kk[1]), np.zeros(B, np.int32)]
    elif base in ("syevd", "syevj"):
        main = (M("the eigenvectors", (n, n)), _V("the eigenvalues", R, B + (n,)), info)
        fn = lambda kk: list(CC.syevd(kk[0], "V", "L" if lower else "U"))          # noqa: E731
    elif base == "gesvd":
        jobu, jobvt = chr(d["jobu"] & 0xFF), chr(d["jobvt"] & 0xFF)
        if jobu not in "ASN" or jobu != jobvt:
            _fail(inst, f"the descriptor's jobu/jobvt must be one of A, S, N (the same for both), got {jobu!r}/{jobvt!r}")
        uc, vr = {"A": (m, n), "S": (k, k), "N": (None, None)}[jobu]
        main = (M("the overwritten matrix", (m, n)), _V("the singular values", R, B + (k,)),
                M("u", (m, uc)) if uc else LC.Slot("u", T, None, True, len(B) + 2),
                M("vt", (vr, n)) if vr else LC.Slot("vt", T, None, True, len(B) + 2), info)
        fn = lambda kk: list(CC.gesvd_family(kk[0], jobu, "gesvd"))               # noqa: E731
    else:                                                           # gesvdj: v, not vt
        vec = d["jobz"] == 1
        # economy mode (a later descriptor field) shows in the declared u: m x k instead of m x m
        leaves = CC.leaf_shapes(inst.shape)
        econ = len(leaves) > 2 and tuple(leaves[2].dims[-2:]) == (m, k) and k < m
        main = (M("the overwritten matrix", (m, n)), _V("the singular values", R, B + (k,)),
                M("u", (m, k) if econ else (m, m)), M("v", (n, k) if econ else (n, n)), info)

        def fn(kk):
            aout, s, u, vt, inf = CC.gesvd_family(kk[0], ("S" if econ else "A") if vec else "N", "gesvd")
            return [aout, s, u if vec else None, np.conj(np.swapaxes(vt, -1, -2)) if vec else None, inf]
    leaves = CC.leaf_shapes(inst.shape)
    if len(leaves) < len(main):
        _fail(inst, f"returns at least {len(main)} results, the declared shape {inst.shape.to_str(False)} has "
                    f"{len(leaves)}")
    work = tuple(LC.Slot(f"workspace {i}", CC.np_dtype(s), None, False, len(s.dims))
                 for i, s in enumerate(leaves[len(main):]))
    ops = (M("the matrix", (m, n)),) + ((_V("tau", T, B + (sizes["k"],)),) if base == "orgqr" else ())
    return _run(inst, args, LC.Contract(ops, main + work), fn)
