"""Linear-algebra and normalization families: dot, ragged-dot, scaled-dot, convolution, fft,
cholesky, triangular-solve, batch-norm-training/-inference/-grad, checked against XLA-made goldens
(tests/programs/linalg) plus unit tests of the measured semantics.

What XLA CPU does (jaxlib 0.10.2, x86-64), measured and pinned by the programs:
- element types: OperandUpcaster / ResultCaster (s8 x s8 -> s32 converts first, f32 x f32 -> s32
  truncates an f32 dot, bf16 x bf16 -> f16 rounds through bf16); bf16/f16 dots are f32 dots rounded
  once; integers wrap; operand_precision and algorithm= change nothing;
- f32 dots and convolutions sum in an order we do not reproduce (YNNPACK / Eigen): programs use
  exactly summable inputs, and the random-input ones carry a tolerance of a few ulps;
- a one-term dot/convolution keeps -0, longer sums of -0 give +0;
- Eigen convolutions multiply padding and dilation holes (0 * inf = NaN); the loop emitter, the
  transposed-convolution kernel and operand-swapped convolutions skip them;
- fft (DUCC), cholesky, triangular-solve (XLA's expanders: all-NaN failed factors, block-inverse
  NaN spreading) and batch norm (one-pass variance, approximate rsqrt) agree to a few ulps.
ragged-dot and scaled-dot cannot run on XLA CPU: their goldens come from
tests/programs/linalg/make_special_goldens.py (JAX's ragged_dot_general; XLA running the
ScaledDotRewriter decomposition, checked against XLA running jax.lax.scaled_dot where JAX can
express the program).
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import check_program, programs  # noqa: E402

PROGRAMS = programs("linalg")


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_program(path):
    check_program(path)


from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.ops import linalg as la  # noqa: E402
from hlo_cli.interpreter.registry import rule_for  # noqa: E402
from hlo_cli.interpreter.ops.convert import etype  # noqa: E402
from hlo_cli.interpreter.values import np_dtype  # noqa: E402
from hlo_cli.ir.opcodes import OPCODES  # noqa: E402

RNG = np.random.default_rng(0)


def test_every_opcode_of_the_families_has_a_rule():
    for name, spec in OPCODES.items():
        if spec.family in ("linalg", "normalization"):
            assert rule_for(name) is not None, name


@pytest.mark.parametrize("lhs, rhs, result, expect", [
    ("f32", "f32", "f32", ("f32", "f32")),
    ("s8", "s8", "s32", ("s32", "s32")),          # OperandUpcaster: convert first
    ("bf16", "bf16", "f32", ("f32", "f32")),
    ("s32", "s32", "f32", ("f32", "f32")),
    ("f32", "f32", "f64", ("f64", "f64")),
    ("f32", "f32", "s32", ("f32", "s32")),        # ResultCaster: dot in f32, then convert
    ("bf16", "bf16", "f16", ("bf16", "f16")),     # f16 cannot hold bf16's range
    ("f16", "f16", "bf16", ("bf16", "bf16")),
    ("f32", "bf16", "bf16", ("f32", "bf16")),
    ("u8", "s8", "s32", ("s32", "s32")),
    ("f64", "f64", "f32", ("f64", "f32")),
])
def test_compute_types(lhs, rhs, result, expect):
    assert la.compute_types(lhs, rhs, result) == expect


def _dot_text(lt, rt, ot, ls, rs, os, dims):
    return (f"HloModule m\nENTRY e {{\n  a = {lt}[{ls}] parameter(0)\n  b = {rt}[{rs}] parameter(1)\n"
            f"  ROOT d = {ot}[{os}] dot(a, b), {dims}\n}}\n")


def test_dot_matches_numpy_on_random_batched_shapes():
    a = RNG.standard_normal((3, 4, 5, 6)).astype(np.float32)
    b = RNG.standard_normal((4, 6, 3, 2)).astype(np.float32)
    text = _dot_text("f32", "f32", "f32", "3,4,5,6", "4,6,3,2", "4,3,5,2",
                     "lhs_batch_dims={1,0}, lhs_contracting_dims={3}, rhs_batch_dims={0,2}, rhs_contracting_dims={1}")
    got = run(text, a, b)
    want = np.einsum("abcd,bdae->bace", a.astype(np.float64), b.astype(np.float64))
    assert np.allclose(got, want, rtol=1e-6, atol=1e-5)


def test_dot_integer_wraps_and_pred():
    a = np.array([[2 ** 62, 2 ** 62]], np.int64)
    b = np.array([[2], [2]], np.int64)
    text = _dot_text("s64", "s64", "s64", "1,2", "2,1", "1,1", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    assert run(text, a, b)[0, 0] == 0                      # 2^64 wraps to 0
    p = np.array([[True, False], [False, False]])
    text = _dot_text("pred", "pred", "pred", "2,2", "2,2", "2,2", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    assert run(text, p, np.array([[False, True], [True, True]])).tolist() == [[False, True], [False, False]]


def test_operand_swap_rule():
    from hlo_cli.ir.attributes import WindowDim
    from hlo_cli.interpreter.ops import convolution as cv
    big = WindowDim(size=3, padding_low=1, padding_high=1)
    assert cv._operands_swapped([2], [big], 1, 1)              # kernel larger than input
    assert not cv._operands_swapped([5], [big], 1, 1)
    assert not cv._operands_swapped([2], [big], 2, 1)          # grouped: never swapped
    assert not cv._operands_swapped([3], [WindowDim(size=3)], 1, 1)   # a pure contraction dim


def test_convolution_matches_a_direct_loop():
    """A 2-D convolution with every window feature against a naive definition."""
    x = RNG.integers(-3, 4, (2, 3, 5, 4)).astype(np.float64)          # b f 0 1
    k = RNG.integers(-3, 4, (6, 3, 2, 3)).astype(np.float64)          # o i 0 1
    text = ("HloModule m\nENTRY e {\n  x = f64[2,3,5,4] parameter(0)\n  k = f64[6,3,2,3] parameter(1)\n"
            "  ROOT c = f64[2,6,6,2] convolution(x, k), window={size=2x3 stride=2x1 pad=1_2x2_0 "
            "lhs_dilate=2x1 rhs_dilate=1x2 rhs_reversal=0x1}, dim_labels=bf01_oi01->bf01\n}\n")
    got = run(text, x, k)
    xd = np.zeros((2, 3, 9, 4))
    xd[:, :, ::2, :] = x                                              # lhs dilation
    xp = np.pad(xd, ((0, 0), (0, 0), (1, 2), (2, 0)))
    kk = k[:, :, :, ::-1]                                             # reversal along dim 1
    out = np.zeros((2, 6, 6, 2))
    for o0 in range(6):
        for o1 in range(2):
            for t0 in range(2):
                for t1 in range(3):
                    p0, p1 = o0 * 2 + t0, o1 + t1 * 2
                    out[:, :, o0, o1] += xp[:, :, p0, p1] @ kk[:, :, t0, t1].T
    assert np.array_equal(got, out)


def test_triangular_solve_over_several_blocks():
    n = 150                                         # > 128: XLA's blocked substitution
    a = (RNG.standard_normal((n, n)) * 0.05 + 2 * np.eye(n)).astype(np.float32)
    b = RNG.standard_normal((n, 3)).astype(np.float32)
    for lower in (True, False):
        for trans in ("NO_TRANSPOSE", "TRANSPOSE"):
            text = (f"HloModule m\nENTRY e {{\n  a = f32[{n},{n}] parameter(0)\n  b = f32[{n},3] parameter(1)\n"
                    f"  ROOT x = f32[{n},3] triangular-solve(a, b), left_side=true, lower={str(lower).lower()}, "
                    f"transpose_a={trans}\n}}\n")
            t = np.tril(a) if lower else np.triu(a)
            t = t.T if trans == "TRANSPOSE" else t
            assert np.allclose(run(text, a, b), np.linalg.solve(t.astype(np.float64), b), rtol=1e-4, atol=1e-5)


def test_cholesky_reconstructs_and_flags_failures():
    m = RNG.standard_normal((4, 6, 6))
    a = m @ m.transpose(0, 2, 1) + 6 * np.eye(6)
    a[3, 4, 4] = -1.0
    text = "HloModule m\nENTRY e {\n  a = f64[4,6,6] parameter(0)\n  ROOT l = f64[4,6,6] cholesky(a), lower=true\n}\n"
    l = run(text, a)
    assert np.allclose(l[:3] @ l[:3].transpose(0, 2, 1), a[:3])
    assert np.isnan(l[3]).all()


def test_batch_norm_training_is_the_textbook_formula():
    x = RNG.standard_normal((8, 3, 4)).astype(np.float32) * 2 + 1
    s, o = RNG.standard_normal(3).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
    text = ("HloModule m\nENTRY e {\n  x = f32[8,3,4] parameter(0)\n  s = f32[3] parameter(1)\n  o = f32[3] parameter(2)\n"
            "  ROOT b = (f32[8,3,4], f32[3], f32[3]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=1\n}\n")
    y, mean, var = run(text, x, s, o)
    xd = x.astype(np.float64)
    m, v = xd.mean(axis=(0, 2)), xd.var(axis=(0, 2))
    want = (xd - m[:, None]) / np.sqrt(v[:, None] + 0.001) * s[:, None] + o[:, None]
    assert np.allclose(mean, m, atol=1e-6) and np.allclose(var, v, rtol=1e-5)
    assert np.allclose(y, want, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- scaled-dot
# XLA's operand order: scaled-dot(lhs, rhs, lhs_scale, rhs_scale).

def _scaled_text(shapes, result, dims="lhs_contracting_dims={1}, rhs_contracting_dims={0}", names="a b sa sb"):
    params = "".join(f"  {n} = {sh} parameter({k})\n" for k, (n, sh) in enumerate(zip(names.split(), shapes)))
    return f"HloModule m\nENTRY e {{\n{params}  ROOT d = {result} scaled-dot(a, b, sa, sb), {dims}\n}}\n"


def test_scaled_dot_scales_blockwise():
    a = RNG.integers(-3, 4, (2, 6)).astype(np.float32)
    b = RNG.integers(-3, 4, (6, 2)).astype(np.float32)
    sa = np.array([[2.0, 0.5, 4.0], [1.0, 1.0, 3.0]], np.float32)     # blocks of 2 along dim 1
    sb = np.array([[1.0, 2.0]], np.float32)                            # one block of 6 along dim 0
    text = _scaled_text(["f32[2,6]", "f32[6,2]", "f32[2,3]", "f32[1,2]"], "f32[2,2]")
    want = (a * np.repeat(sa, 2, axis=1)) @ (b * np.repeat(sb, 6, axis=0))
    assert np.array_equal(run(text, a, b, sa, sb), want)
    # blocks along a non-contracting dim too: both rows share each scale
    sa1 = np.array([[2.0, 0.5, 4.0]], np.float32)
    text = _scaled_text(["f32[2,6]", "f32[6,2]", "f32[1,3]", "f32[1,2]"], "f32[2,2]")
    want = (a * np.repeat(np.repeat(sa1, 2, axis=1), 2, axis=0)) @ (b * np.repeat(sb, 6, axis=0))
    assert np.array_equal(run(text, a, b, sa1, sb), want)


def test_scaled_dot_noop_scales():
    """A bf16 scale of a bf16 operand with all dims 1 is XLA's no-op scale: a scalar one is never
    read (XLA's rewriter and evaluator both skip it), one of the operand's rank multiplies by its
    value (both multiply); one of another rank, which XLA's verifier accepts but no XLA backend can
    evaluate, multiplies by its one value here."""
    a = RNG.integers(-3, 4, (2, 4)).astype(ml_dtypes.bfloat16)
    b = RNG.integers(-3, 4, (4, 3)).astype(ml_dtypes.bfloat16)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    three, two = np.array(3, ml_dtypes.bfloat16), np.full((1, 1), 2, ml_dtypes.bfloat16)
    text = _scaled_text(["bf16[2,4]", "bf16[4,3]", "bf16[]", "bf16[1,1]"], "f32[2,3]")
    assert np.array_equal(run(text, a, b, three, two), af @ (bf * 2))
    text = _scaled_text(["bf16[2,4]", "bf16[4,3]", "bf16[1,1,1]", "bf16[]"], "f32[2,3]")
    assert np.array_equal(run(text, a, b, np.full((1, 1, 1), 4, ml_dtypes.bfloat16), three), (af * 4) @ bf)


@pytest.mark.parametrize("x, scale, expect", [
    ("float8_e4m3fn", "float8_e8m0fnu", "bfloat16"),      # both narrower than 16 bits: bf16
    ("float4_e2m1fn", "float8_e8m0fnu", "bfloat16"),
    ("int8", "float8_e8m0fnu", "bfloat16"),
    ("bfloat16", "bfloat16", "bfloat16"),                 # the same type
    ("int32", "int32", "int32"),
    ("float16", "bfloat16", "float32"),                   # two types of one width: f32
    ("int32", "float32", "float32"),
    ("float32", "bfloat16", "float32"),                   # else the wider
    ("float64", "float32", "float64"),
    ("float8_e5m2", "bfloat16", "bfloat16"),
])
def test_scaled_dot_target_type(x, scale, expect):
    dt = lambda n: np.dtype(getattr(ml_dtypes, n, None) or n)         # noqa: E731
    assert la._target_type(dt(x), dt(scale)) == dt(expect)
    assert la._target_type(dt(scale), dt(x)) == dt(expect)


def test_scaled_dot_scales_mxfp8_in_bf16():
    """f8e4m3fn x f8e8m0fnu is scaled in bf16 by XLA CPU's bf16 multiply (f32 under DAZ/FTZ):
    2^-127 (a bf16 subnormal) scales to 0, 448 * 2^127 overflows to inf, an e8m0 NaN gives NaN."""
    a = np.ones((3, 32), ml_dtypes.float8_e4m3fn)
    a[1] = 448
    b = np.ones((32, 1), ml_dtypes.float8_e4m3fn)
    sa = np.array([[2.0 ** -127], [2.0 ** 127], [np.nan]], np.float32).astype(ml_dtypes.float8_e8m0fnu)
    sb = np.ones((1, 1), ml_dtypes.float8_e8m0fnu)
    text = _scaled_text(["f8e4m3fn[3,32]", "f8e4m3fn[32,1]", "f8e8m0fnu[3,1]", "f8e8m0fnu[1,1]"], "f32[3,1]")
    out = run(text, a, b, sa, sb)
    assert out[0, 0] == 0 and np.isposinf(out[1, 0]) and np.isnan(out[2, 0])
    # a bf16 result is a bf16 dot: the f32 sum rounded once
    a = np.full((1, 64), 1.125, ml_dtypes.float8_e4m3fn)
    a[0, 0] = 2.0 ** -3
    b = np.ones((64, 1), ml_dtypes.float8_e4m3fn)
    sa = np.ones((1, 2), ml_dtypes.float8_e8m0fnu)
    text = _scaled_text(["f8e4m3fn[1,64]", "f8e4m3fn[64,1]", "f8e8m0fnu[1,2]", "f8e8m0fnu[1,1]"], "bf16[1,1]")
    out = run(text, a, b, sa, sb)
    assert out.dtype == ml_dtypes.bfloat16 and out[0, 0] == np.float32(63 * 1.125 + 0.125).astype(ml_dtypes.bfloat16)


_GOLDENS = runpy.run_path(str(Path(__file__).resolve().parents[1] / "programs" / "linalg" / "make_special_goldens.py"))


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_scaled_dot_is_its_decomposition(data):
    """The law the rule is built on: a scaled-dot evaluates bit for bit like the ops XLA's
    ScaledDotRewriter replaces it with (make_special_goldens.equivalent), whatever the types,
    blocks, batch dims and result type."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    kinds = [("f8e4m3fn", "f8e8m0fnu"), ("f8e5m2", "f8e8m0fnu"), ("f4e2m1fn", "f8e8m0fnu"), ("bf16", "bf16"),
             ("f32", "bf16"), ("f16", "f32"), ("s8", "f8e8m0fnu"), ("f64", "f32")]
    (lt, lst), (rt, rst) = data.draw(st.sampled_from(kinds)), data.draw(st.sampled_from(kinds))
    result = data.draw(st.sampled_from(["f32", "bf16", "f16", "f64"]))
    batch, m, n = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    blocks = data.draw(st.integers(1, 3))
    k = blocks * data.draw(st.sampled_from([1, 2, 4]))
    lead = [batch] if batch else []
    lshape, rshape = lead + [m, k], lead + [n, k]
    lscale = list(lshape[:-1]) + [blocks]
    rscale = [d if data.draw(st.booleans()) else 1 for d in rshape[:-1]] + [blocks]
    b = "lhs_batch_dims={0}, rhs_batch_dims={0}, " if batch else ""
    c = len(lshape) - 1
    dims = f"{b}lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{c}}}"
    out = lead + [m, n]
    sh = lambda t, d: f"{t}[{','.join(map(str, d))}]"                  # noqa: E731
    text = _scaled_text([sh(lt, lshape), sh(rt, rshape), sh(lst, lscale), sh(rst, rscale)], sh(result, out), dims)

    def values(t, shape, scale=False):
        dt = np_dtype(t)
        if scale:
            return (2.0 ** rng.integers(-3, 4, shape)).astype(dt)
        return (rng.standard_normal(shape) * 3).astype(np.float64).round(1).astype(dt) if dt.kind != "i" else \
            rng.integers(-100, 100, shape).astype(dt)
    args = [values(lt, lshape), values(rt, rshape), values(lst, lscale, True), values(rst, rscale, True)]
    ours = run(text, *args)
    want = run(_GOLDENS["equivalent"](text), *args)
    assert ours.dtype == want.dtype and np.array_equal(ours.view(np.uint8), want.view(np.uint8))


jax = pytest.importorskip("jax", reason="ragged-dot is compared with JAX's reference decomposition")


@pytest.mark.parametrize("case", range(4))
def test_ragged_dot_against_jax(case):
    from jax import lax
    rng = np.random.default_rng(100 + case)
    ints = lambda *s: rng.integers(-3, 4, s).astype(np.float32)   # noqa: E731
    if case == 0:      # non-contracting, groups not covering every row
        lhs, rhs, gs = ints(9, 4), ints(3, 4, 5), np.array([1, 5, 2], np.int32)
        dn = (([1], [1]), ([], [])), [0], [0]
    elif case == 1:    # non-contracting with a batch dim and per-batch group sizes, rhs group dim last
        lhs, rhs, gs = ints(2, 6, 3), ints(2, 3, 4, 2), np.array([[2, 4], [6, 0]], np.int32)
        dn = (([2], [1]), ([0], [0])), [1], [3]
    elif case == 2:    # contracting with a batch dim and per-batch group sizes
        lhs, rhs, gs = ints(2, 3, 7), ints(2, 7, 4), np.array([[3, 3, 1], [0, 2, 2]], np.int32)
        dn = (([2], [1]), ([0], [0])), [2], []
    else:              # ragged batch dim: a plain dot
        lhs, rhs, gs = ints(3, 2, 4), ints(3, 4, 5), np.array([1, 2], np.int32)
        dn = (([2], [1]), ([0], [0])), [0], []
    (lc, rc), (lb, rb) = dn[0]
    want = np.asarray(lax.ragged_dot_general(lhs, rhs, gs, lax.RaggedDotDimensionNumbers(dn[0], dn[1], dn[2])))
    f = lambda v: "{" + ",".join(map(str, v)) + "}"               # noqa: E731
    s = lambda a: ",".join(map(str, a.shape))                     # noqa: E731
    text = (f"HloModule m\nENTRY e {{\n  a = f32[{s(lhs)}] parameter(0)\n  b = f32[{s(rhs)}] parameter(1)\n"
            f"  g = s32[{s(gs)}] parameter(2)\n  ROOT d = f32[{s(want)}] ragged-dot(a, b, g), lhs_batch_dims={f(lb)}, "
            f"lhs_contracting_dims={f(lc)}, rhs_batch_dims={f(rb)}, rhs_contracting_dims={f(rc)}, "
            f"lhs_ragged_dims={f(dn[1])}, rhs_group_dims={f(dn[2])}\n}}\n")
    assert np.array_equal(run(text, lhs, rhs, gs), want)


@pytest.mark.parametrize("seed, lt, rt, result, batch", [
    (0, "float8_e4m3fn", "float8_e4m3fn", "float32", False),
    (1, "float8_e5m2", "float8_e4m3fn", "bfloat16", True),
    (2, "float4_e2m1fn", "float8_e5m2", "float32", True),
])
def test_scaled_dot_against_jax(seed, lt, rt, result, batch):
    """XLA CPU running jax.lax.scaled_dot (a composite call whose body JAX decomposes itself: bf16
    converts and multiplies, then a dot) gives our scaled-dot's bits, on random MX operands.  The
    values keep the sums exact: XLA's f32 dot sums in an order we do not reproduce (see the dot)."""
    from jax import lax
    rng = np.random.default_rng(200 + seed)
    lead = [2] if batch else []
    small = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])   # f4e2m1fn's values
    lhs = rng.choice(small, lead + [3, 64]).astype(getattr(ml_dtypes, lt))
    rhs = rng.choice(small, lead + [64, 5]).astype(getattr(ml_dtypes, rt))
    ls = (2.0 ** rng.integers(-2, 3, lead + [3, 2])).astype(ml_dtypes.float8_e8m0fnu)
    rs = (2.0 ** rng.integers(-2, 3, lead + [2, 5])).astype(ml_dtypes.float8_e8m0fnu)
    c = len(lead)
    dn = (((c + 1,), (c,)), ((0,), (0,)) if batch else ((), ()))
    want = np.asarray(jax.jit(lambda x, y, sx, sy: lax.scaled_dot(
        x, y, lhs_scale=sx, rhs_scale=sy, dimension_numbers=dn, preferred_element_type=np.dtype(getattr(
            ml_dtypes, result, None) or result)))(lhs, rhs, ls, rs))
    sh = lambda a: f"{etype(a.dtype).name}[{','.join(map(str, a.shape))}]"       # noqa: E731
    b = "lhs_batch_dims={0}, rhs_batch_dims={0}, " if batch else ""
    text = _scaled_text([sh(lhs), sh(rhs), sh(ls), sh(rs)], sh(want),
                        f"{b}lhs_contracting_dims={{{c + 1}}}, rhs_contracting_dims={{{c}}}")
    ours = run(text, lhs, rhs, ls, rs)
    assert ours.dtype == want.dtype and np.array_equal(ours.view(np.uint8), want.view(np.uint8))
