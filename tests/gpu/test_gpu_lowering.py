"""JAX's own GPU lowerings, run with hlo and compared with XLA CPU.

JAX lowers for a platform it is not running on (`.lower(lowering_platforms=("cuda",))`), so the
texts here are exactly what a CUDA or ROCm machine would compile before XLA's optimizations: the
jaxlib targets with their layouts, backend_config options and info handling.  Each is converted to
HLO text (jaxlib's converter), run with hlo, and compared with the same function run by XLA CPU;
where the library chooses signs (eigen-, singular vectors) the comparison is by the law instead.
"""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.interpreter import run

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

pytestmark = pytest.mark.slow
PLATFORMS = ["cuda", "rocm"]


def lowered_text(fn, *args, platform="cuda"):
    """HLO text of fn lowered for `platform`, and the custom-call targets in it."""
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax, hlo
    low = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,))
    data = mlir.module_to_bytecode(low.compiler_ir("stablehlo"))
    comp = _jax.mlir.mlir_module_to_xla_computation(data, use_tuple_args=False, return_tuple=False)
    opts = hlo.HloPrintOptions.short_parsable()
    opts.print_metadata = False
    text = comp.as_hlo_module().to_string(opts)
    import re
    return text, sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))


def on_cpu(fn, *args):
    with jax.default_device(jax.devices("cpu")[0]):
        out = jax.jit(fn)(*args)
    return jax.tree_util.tree_map(np.asarray, out)


def both(fn, *args, platform="cuda"):
    text, targets = lowered_text(fn, *args, platform=platform)
    got = run(text, *args)
    return got, on_cpu(fn, *args), targets


def _spd(rng, b, n, dt=np.float32):
    x = rng.standard_normal((b, n, n)).astype(dt)
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n, dtype=dt)).astype(dt)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_cholesky_lu_qr_solve_inv_det(platform):
    rng = np.random.default_rng(0)
    a = _spd(rng, 2, 5)
    b = rng.standard_normal((2, 5, 3)).astype(np.float32)
    pre = "cusolver" if platform == "cuda" else "hipsolver"

    got, want, targets = both(jnp.linalg.cholesky, a, platform=platform)
    assert targets == [f"{pre}_potrf_ffi"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    got, want, targets = both(lax.linalg.lu, a, platform=platform)
    assert f"{pre}_getrf_ffi" in targets
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)

    got, want, targets = both(jnp.linalg.qr, a[0], platform=platform)
    assert {f"{pre}_geqrf_ffi", f"{pre}_orgqr_ffi"} <= set(targets)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)

    got, want, _ = both(jnp.linalg.solve, a, b, platform=platform)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    got, want, _ = both(jnp.linalg.det, a, platform=platform)
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("n", [6, 40])          # syevj (n <= 32) and syevd on the GPU
def test_eigh(platform, n):
    rng = np.random.default_rng(n)
    a = _spd(rng, 2, n)
    (w, v), (ww, _), targets = both(jnp.linalg.eigh, a, platform=platform)
    assert any(t.endswith("solver_syevd_ffi") for t in targets)
    np.testing.assert_allclose(w, ww, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=2e-4 * n * np.abs(w).max())


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("shape, full", [((2, 5, 3), False), ((2, 3, 5), True), ((4, 4), True)])
def test_svd(platform, shape, full):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape).astype(np.float32)
    (u, s, vt), (_, ws, _), targets = both(lambda x: jnp.linalg.svd(x, full_matrices=full), a, platform=platform)
    assert any("gesvd" in t for t in targets)
    np.testing.assert_allclose(s, ws, rtol=1e-5, atol=1e-5)
    k = min(shape[-2:])
    np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :], a, atol=1e-4)
    got, want, _ = both(lambda x: jnp.linalg.svd(x, compute_uv=False), a, platform=platform)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5)])
def test_svd_qr_algorithm_takes_gesvd_and_its_transposed_mode(shape):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(shape).astype(np.float32)
    fn = lambda x: lax.linalg.svd(x, full_matrices=True, algorithm=lax.linalg.SvdAlgorithm.QR)  # noqa: E731
    text, targets = lowered_text(fn, a)
    assert targets == ["cusolver_gesvd_ffi"]
    assert ("transposed = true" in text) == (shape[-2] < shape[-1])
    u, s, vt = run(text, a)
    k = min(shape[-2:])
    np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vt[..., :k, :], a, atol=1e-5)
    np.testing.assert_allclose(s, on_cpu(fn, a)[1], rtol=1e-5)


def test_eig_goes_through_the_hybrid_kernel():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 4, 4)).astype(np.float32)
    (w, vr), (ww, _), targets = both(jnp.linalg.eig, a)
    assert targets == ["cuhybrid_eig_real"]
    key = lambda z: np.lexsort((z.imag, z.real))                                  # noqa: E731
    for g, e in zip(w, ww):
        np.testing.assert_allclose(g[key(g)], e[key(e)], atol=1e-4)
    np.testing.assert_allclose(a @ vr, vr * w[..., None, :], atol=1e-4)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_tridiagonal_and_tridiagonal_solve(platform):
    rng = np.random.default_rng(4)
    a = _spd(rng, 2, 5)
    got, want, targets = both(lambda x: lax.linalg.tridiagonal(x, lower=True), a, platform=platform)
    assert any(t.endswith("sytrd_ffi") for t in targets)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    dl = np.r_[0, rng.standard_normal(5)].astype(np.float32)
    d = (4 + rng.random(6)).astype(np.float32)
    du = np.r_[rng.standard_normal(5), 0].astype(np.float32)
    b = rng.standard_normal((6, 2)).astype(np.float32)
    got, want, targets = both(lax.linalg.tridiagonal_solve, dl, d, du, b, platform=platform)
    assert any(t.endswith("sparse_gtsv2_ffi") for t in targets)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_symmetric_product_takes_syrk():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    c = rng.standard_normal((2, 4, 4)).astype(np.float32)
    c = c + np.swapaxes(c, -1, -2)
    fn = lambda a, c: lax.linalg.symmetric_product(a, c, alpha=2.0, beta=0.5)   # noqa: E731
    text, targets = lowered_text(fn, a, c)
    assert targets == ["cusolver_syrk_ffi"]
    got = run(text, a, c)
    want = 2 * a @ np.swapaxes(a, -1, -2) + 0.5 * c
    low = np.tril(np.ones((4, 4), bool))
    np.testing.assert_allclose(got[..., low], want[..., low], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_threefry_kernel_gives_jax_randoms_bits(platform):
    key = jax.random.key_data(jax.random.key(42))
    fn = lambda k: jax.random.uniform(jax.random.wrap_key_data(k), (3, 5))    # noqa: E731
    from jax._src import config
    with config.threefry_gpu_kernel_lowering(True):
        text, targets = lowered_text(fn, np.asarray(key), platform=platform)
    assert targets == [f"{'cu' if platform == 'cuda' else 'hip'}_threefry2x32_ffi"]
    np.testing.assert_array_equal(run(text, np.asarray(key)), on_cpu(fn, np.asarray(key)))


def test_spsolve_takes_csrlsvqr():
    from jax.experimental import sparse
    from jax.experimental.sparse import linalg as splinalg
    a = np.array([[4, 1, 0, 0], [1, 3, 1, 0], [0, 1, 2, 0], [0, 0, 0, 5]], np.float32)
    m = sparse.BCSR.fromdense(a)
    b = np.arange(1, 5, dtype=np.float32)
    fn = lambda data, indices, indptr, b: splinalg.spsolve(data, indices, indptr, b)   # noqa: E731
    args = (np.asarray(m.data), np.asarray(m.indices), np.asarray(m.indptr), b)
    text, targets = lowered_text(fn, *args)
    assert targets == ["cusolver_csrlsvqr_ffi"]
    np.testing.assert_allclose(run(text, *args), np.linalg.solve(a, b), rtol=1e-5)


def test_cholesky_update():
    rng = np.random.default_rng(6)
    a = _spd(rng, 1, 5)[0]
    r = np.linalg.cholesky(a.astype(np.float64)).T.astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)
    got, want, targets = both(lax.linalg.cholesky_update, r, w)
    assert targets == ["cu_cholesky_update_ffi"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.T @ got, a + np.outer(w, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize("n, singular", [(1, False), (1, True), (2, True), (5, False), (6, True)])
def test_tridiagonal_solve_with_perturbed_singular_pivots(platform, n, singular):
    """perturb_singular=True: jaxlib's perturbed solver (tridiagonal_solve_perturbed_ffi on the CPU,
    cu_tridiagonal_solve_perturbed on CUDA); XLA CPU runs the same algorithm, so singular systems
    must give its (large, finite) values too."""
    rng = np.random.default_rng(n)
    dl = np.r_[0, rng.standard_normal(n - 1)].astype(np.float32)
    d = rng.standard_normal(n).astype(np.float32)
    du = np.r_[rng.standard_normal(n - 1), 0].astype(np.float32)
    if singular:               # T - lambda I with lambda an eigenvalue of T: numerically singular
        t = np.diag(d) + np.diag(du[:-1], 1) + np.diag(dl[1:], -1)
        d = (d - np.linalg.eigvals(t.astype(np.float64)).real[0]).astype(np.float32)
        if n == 1:
            d[:] = 0
    b = np.stack([rng.standard_normal((n, 2)).astype(np.float32)] * 2)
    dls, ds, dus = (np.stack([v, v]) for v in (dl, d, du))
    fn = lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b, perturb_singular=True)  # noqa: E731
    got, want, targets = both(fn, dls, ds, dus, b, platform=platform)
    assert targets == (["tridiagonal_solve_perturbed_ffi"] if platform == "cpu" else ["cu_tridiagonal_solve_perturbed"])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1, np.abs(want).max()))
