"""Live differential tests against XLA CPU through the installed JAX.

Each program is jitted, lowered (`jax.jit(f).lower(*args)`), and both of its texts -- before XLA's
optimizations (`.as_text("hlo")`) and after (`.compile().as_text()`) -- are run by hlo on the same
inputs and compared with what the jitted function returns.  The programs are the case functions of
scripts/gen_samples.py (imported, not copied: networks with their gradients, scans, loops,
conditionals, sorting, gathers and scatters, every dtype, FFT, linear algebra, random numbers) plus
EXTRA_PROGRAMS below for what those leave out (bf16 and f16 networks, pooling gradients
(select-and-scatter), LU-based linear algebra, integer kernels, nested control flow, more random
distributions, 64-bit types, batched gathers).

Outputs are compared bit for bit unless a tolerance says why XLA's floats cannot be reproduced
exactly: for the gen_samples cases the table of tests/test_samples_run.py (measured on the same
programs), for the extra programs EXTRA_TOLERANCES below (measured the same way: the largest
difference over both texts, with a 2-4x margin).
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")
from jax import lax  # noqa: E402

from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.values import leaves  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_gen_samples():
    """scripts/gen_samples.py's case registry; importing it sets a JAX option (the source-file
    canonicalization of its sample texts) that is put back afterwards."""
    old = jax.config.jax_hlo_source_file_canonicalization_regex
    try:
        return _load(ROOT / "scripts" / "gen_samples.py", "_hlo_tests_gen_samples")
    finally:
        jax.config.update("jax_hlo_source_file_canonicalization_regex", old)


GEN = _load_gen_samples()
SAMPLES_TEST = _load(ROOT / "tests" / "test_samples_run.py", "_hlo_tests_samples_run")
assert_matches_xla = SAMPLES_TEST.assert_matches_xla


# ============================================================================ extra programs

def _rng(seed):
    return np.random.default_rng(seed)


def bf16_mlp():
    """bf16 weights, f32 accumulation, gelu, value_and_grad: bf16 gradients."""
    r = _rng(100)
    p = {"w1": r.standard_normal((8, 16)).astype(ml_dtypes.bfloat16),
         "w2": r.standard_normal((16, 3)).astype(ml_dtypes.bfloat16)}
    x = r.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)

    def f(p, x):
        def loss(p):
            h = jax.nn.gelu(jnp.dot(x, p["w1"], preferred_element_type=jnp.float32).astype(jnp.bfloat16))
            y = jnp.dot(h, p["w2"], preferred_element_type=jnp.float32)
            return jnp.mean(y ** 2)
        return jax.value_and_grad(loss)(p)
    return f, (p, x)


def pool_grads():
    """Gradients of a max pool (select-and-scatter) and of a SAME average pool (padded reduce-window)."""
    x = _rng(101).standard_normal((2, 6, 6, 3)).astype(np.float32)

    def f(x):
        def loss(x):
            m = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            a = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME") / 9.0
            return jnp.sum(m * m) + jnp.sum(jnp.tanh(a))
        return jax.grad(loss)(x)
    return f, (x,)


def lu_linalg():
    """LU (getrf) based solve/inv/det/slogdet, SVD-based pinv and lstsq."""
    r = _rng(102)
    a = (r.standard_normal((4, 4)) + 4 * np.eye(4)).astype(np.float32)
    b = r.standard_normal((4, 3)).astype(np.float32)

    def f(a, b):
        return {"solve": jnp.linalg.solve(a, b), "inv": jnp.linalg.inv(a), "det": jnp.linalg.det(a),
                "slogdet": jnp.linalg.slogdet(a), "pinv": jnp.linalg.pinv(a[:, :3]),
                "lstsq": jnp.linalg.lstsq(a[:, :3], b)[0]}
    return f, (a, b)


def int_ops():
    """int8 matmuls (widened and wrapping), scans, searchsorted, bincount, segment ops, uint16, gcd."""
    r = _rng(103)
    a8 = r.integers(-128, 128, (4, 8)).astype(np.int8)
    b8 = r.integers(-128, 128, (8, 3)).astype(np.int8)
    xi = r.integers(-1000, 1000, (16,)).astype(np.int32)
    sorted_v = np.sort(r.integers(0, 50, (10,))).astype(np.int32)
    q = r.integers(-5, 60, (7,)).astype(np.int32)
    seg = np.array([0, 0, 1, 3, 3, 3, 2, 1] * 2, np.int32)
    u16 = r.integers(0, 65536, (8,)).astype(np.uint16)

    def f(a8, b8, xi, sorted_v, q, seg, u16):
        return {"i8_matmul": lax.dot(a8, b8, preferred_element_type=jnp.int32),
                "i8_matmul_wrap": jnp.matmul(a8, b8),
                "cumsum": jnp.cumsum(xi), "cumprod": jnp.cumprod(xi[:8] % 7),
                "searchsorted": jnp.searchsorted(sorted_v, q),
                "searchsorted_r": jnp.searchsorted(sorted_v, q, side="right"),
                "bincount": jnp.bincount(seg, length=5),
                "segment_sum": jax.ops.segment_sum(xi, seg, num_segments=4),
                "segment_max": jax.ops.segment_max(xi, seg, num_segments=5),
                "clip": jnp.clip(xi, -100, 250), "ipow": xi[:4] ** 3, "sign": jnp.sign(xi),
                "u16_ops": (u16 * jnp.uint16(3)) ^ (u16 >> 2), "u16_to_f": u16.astype(jnp.float32) / 7,
                "gcd": jnp.gcd(xi[:8], xi[8:]), "argmax_int": jnp.argmax(xi)}
    return f, (a8, b8, xi, sorted_v, q, seg, u16)


def nested_control():
    """scan over a cond whose branch runs a fori_loop; lax.map; a while loop with a mixed carry."""
    xs = _rng(104).standard_normal((6, 3)).astype(np.float32)
    n = np.int32(3)

    def f(xs, n):
        def step(c, x):
            y = lax.cond(jnp.sum(x) > 0, lambda v: lax.fori_loop(0, n, lambda i, a: a * 0.5 + i, v),
                         lambda v: -v, x)
            return c + jnp.sum(y), y
        c, ys = lax.scan(step, jnp.float32(0), xs)
        m = lax.map(lambda v: jnp.max(v) - jnp.min(v), xs)
        w = lax.while_loop(lambda s: (s[0] < 100) & (s[1] < 20),
                           lambda s: (s[0] * 2 + 1, s[1] + 1, s[2] + s[0].astype(jnp.int32)),
                           (jnp.float32(1.5), jnp.int32(0), jnp.int32(0)))
        return c, ys, m, w
    return f, (xs, n)


def random_more():
    """permutation, randint, bernoulli, categorical, choice without replacement, truncated normal."""
    def f(seed):
        ks = jax.random.split(jax.random.key(seed), 6)
        return {"perm": jax.random.permutation(ks[0], 10), "randint": jax.random.randint(ks[1], (8,), -5, 5),
                "bern": jax.random.bernoulli(ks[2], 0.3, (12,)),
                "cat": jax.random.categorical(ks[3], jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(8,)),
                "choice": jax.random.choice(ks[4], 20, (5,), replace=False),
                "trunc": jax.random.truncated_normal(ks[5], -1.0, 2.0, (6,))}
    return f, (np.uint32(7),)


def f16_conv():
    """f16 convolution, and a strided, padded, dilated one accumulated in f32."""
    r = _rng(105)
    x = r.standard_normal((1, 8, 8, 2)).astype(np.float16)
    w = (r.standard_normal((3, 3, 2, 4)) * 0.3).astype(np.float16)
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn)
        y32 = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (0, 0)), rhs_dilation=(1, 2), dimension_numbers=dn,
                                       preferred_element_type=jnp.float32)
        return jax.nn.relu(y), y32, jnp.mean(y.astype(jnp.float32), axis=(1, 2))
    return f, (x, w)


def x64_numerics():
    """f64 Newton iteration, int64/uint64 arithmetic and shifts, complex128 matmul (x64 enabled)."""
    r = _rng(106)
    d = r.random(5) * 10 + 0.1
    i64 = r.integers(-2 ** 40, 2 ** 40, (6,)).astype(np.int64)
    u64 = r.integers(0, 2 ** 63, (4,), dtype=np.uint64)
    c = (r.standard_normal((3, 3)) + 1j * r.standard_normal((3, 3))).astype(np.complex128)

    def f(d, i64, u64, c):
        return {"sqrt_newton": lax.fori_loop(0, 20, lambda i, y: 0.5 * (y + d / y), d),
                "i64_cumprod": jnp.cumprod(i64[:3] % 1000), "i64_div": i64 // jnp.int64(7),
                "i64_to_f64": i64.astype(jnp.float64) * 1e-3, "u64_mul": u64 * jnp.uint64(3),
                "u64_shr": u64 >> jnp.uint64(17), "c128_matmul": c @ c, "c128_abs": jnp.abs(c),
                "f64_exp": jnp.exp(d), "f64_sum": jnp.sum(d * d)}
    return f, (d, i64, u64, c)


def gather_scatter_more():
    """vmapped dynamic_slice, 2-D take, .at[].min/.multiply, one_hot, stable argsort with ties,
    jnp.unique with a size, reversed strided slices, reflect padding."""
    r = _rng(107)
    m = r.standard_normal((5, 6)).astype(np.float32)
    idx = np.array([[0, 1], [4, 2], [2, 5]], np.int32)
    starts = np.array([0, 2, 3, 5], np.int32)
    t = np.array([[3, 1, 3, 2], [1, 1, 0, 0]], np.float32)

    def f(m, idx, starts, t):
        return {"vmap_dslice": jax.vmap(lambda s: lax.dynamic_slice(m, (s, 1), (2, 3)))(starts),
                "take_2d": jnp.take(m, idx, axis=1), "at_min": m.at[idx[:, 0], idx[:, 1]].min(-1.0),
                "at_mul": m.at[:, 2].multiply(3.0), "one_hot": jax.nn.one_hot(starts, 6),
                "argsort_ties": jnp.argsort(t, axis=1, stable=True),
                "unique": jnp.unique(t, size=5, fill_value=-1.0), "where_scalar": jnp.where(m > 0, m, 0.0),
                "rev": m[::-1, ::2], "pad": jnp.pad(m, ((1, 0), (2, 1)), mode="reflect")}
    return f, (m, idx, starts, t)


# name -> (builder, needs x64)
EXTRA_PROGRAMS = {
    "bf16_mlp": (bf16_mlp, False), "pool_grads": (pool_grads, False), "lu_linalg": (lu_linalg, False),
    "int_ops": (int_ops, False), "nested_control": (nested_control, False),
    "random_more": (random_more, False), "f16_conv": (f16_conv, False), "x64_numerics": (x64_numerics, True),
    "gather_scatter_more": (gather_scatter_more, False),
}

# case -> [(path regex, rtol, atol, reason, texts it applies to)]; every other output is bit-exact.
EXTRA_TOLERANCES: dict[str, list[tuple[str, float, float, str, tuple[str, ...]]]] = {
    # the f32 loss: 1 ulp (needed rtol 6e-8); the bf16 gradients are exact in both texts (the
    # unoptimized one through XLA CPU's excess precision, interpreter/excess_precision.py)
    "bf16_mlp": [(r"^\[0\]$", 2e-7, 0.0, SAMPLES_TEST._DOT, ("hlo", "opt"))],
    # tanh of a padded window sum; needed rtol 2.9e-7 at atol 1e-8
    "pool_grads": [(r".*", 1e-6, 1e-8, f"{SAMPLES_TEST._DOT}; {SAMPLES_TEST._TRANSCENDENTAL} (tanh)",
                    ("hlo", "opt"))],
    # pinv and lstsq go through an SVD (gesdd); needed rtol 1.8e-7 at atol 1e-8. solve/inv/det are exact
    "lu_linalg": [(r"pinv|lstsq", 1e-6, 1e-8, "SVD-based: LAPACK's gesdd blocks its loops differently",
                   ("hlo", "opt"))],
    # x / 7 in the unoptimized text: XLA multiplies by the reciprocal instead (1 ulp, rtol 9.5e-8)
    "int_ops": [(r"u16_to_f", 2e-7, 0.0, "XLA's algebraic simplifier turns division by a constant into "
                                         "multiplication by its reciprocal", ("hlo",))],
    "nested_control": [],
    # truncated normal through erf_inv: needed rtol 6.6e-7 at atol 1e-8
    "random_more": [(r"trunc", 2e-6, 1e-8, SAMPLES_TEST._TRANSCENDENTAL, ("hlo", "opt"))],
    # the f32-accumulated convolution: needed rtol 2e-7 at atol 1e-8; f16 results are exact
    "f16_conv": [(r"^\[1\]$", 5e-7, 1e-8, f"convolutions are sums: {SAMPLES_TEST._DOT}", ("hlo", "opt"))],
    # complex128 matmul: 1 ulp (2e-16)
    "x64_numerics": [(r"c128_matmul", 1e-15, 0.0, SAMPLES_TEST._DOT, ("hlo", "opt"))],
    "gather_scatter_more": [],
}


# ============================================================================ the machinery

def _builder(case: str):
    if case in EXTRA_PROGRAMS:
        return EXTRA_PROGRAMS[case]
    spec = GEN.CASES[case]
    return spec["builder"], bool(spec["x64"])


@functools.lru_cache(maxsize=None)
def _lowered(case: str):
    """(texts {"hlo", "opt"}, flat inputs, XLA's output leaves, their pytree paths) of one case."""
    build, x64 = _builder(case)
    with jax.enable_x64(x64):
        fn, args = build()
        jitted = jax.jit(fn, keep_unused=True)
        lowered = jitted.lower(*args)
        texts = {"hlo": lowered.as_text("hlo"), "opt": lowered.compile().as_text()}
        out = jitted(*args)
    flat_out, _ = jax.tree_util.tree_flatten_with_path(out)
    ref = [np.asarray(v) for _, v in flat_out]
    paths = [jax.tree_util.keystr(p) for p, _ in flat_out]
    inputs = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    return texts, inputs, ref, paths


def _tolerance(case: str, path: str, which: str):
    import re
    if case in EXTRA_TOLERANCES:
        for pattern, rtol, atol, reason, texts in EXTRA_TOLERANCES[case]:
            if which in texts and re.search(pattern, path):
                return rtol, atol, reason
        return None
    return SAMPLES_TEST.tolerance_for(case, path)


CASES = list(GEN.CASES) + list(EXTRA_PROGRAMS)


def test_cases_are_importable_and_have_tolerance_tables():
    assert len(GEN.CASES) >= 10
    assert set(GEN.CASES) <= set(SAMPLES_TEST.TOLERANCES)
    assert set(EXTRA_PROGRAMS) == set(EXTRA_TOLERANCES)


@pytest.mark.parametrize("which", ["hlo", "opt"])
@pytest.mark.parametrize("case", CASES)
def test_agrees_with_xla(case, which):
    texts, inputs, ref, paths = _lowered(case)
    ours = [np.asarray(v) for v in leaves(run(texts[which], *inputs))]
    assert len(ours) == len(ref), f"{len(ours)} results, XLA gave {len(ref)}"
    failures = []
    for k, (a, b, path) in enumerate(zip(ours, ref, paths)):
        try:
            assert_matches_xla(a, b, _tolerance(case, path, which), f"{case} ({which}) out{k} {path}")
        except AssertionError as e:
            failures.append(str(e).strip())
    assert not failures, f"{len(failures)} of {len(ours)} outputs differ from XLA's:\n" + "\n".join(failures)
