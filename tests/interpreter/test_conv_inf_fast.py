"""f32 convolutions of operands holding +-inf (and NaN) take one sum over the operands as they are
(_inf_conv: the processor's IEEE rules give XLA's NaN and inf positions), repaired only where the
strategies' partial padding or the NaN bits' precedence need it.  They give the indicator-count
route's bits exactly (that route is the reference here, itself checked against the tap loop by
test_conv_nonfinite), fall back to it when a finite partial sum could overflow or a non-finite
kernel tap meets padding the loop emitter skips, and match XLA CPU's NaN/+inf/-inf positions on
MobileNetV2's convolution shapes with NaN, +-inf (and subnormals, read as zeros) in both operands."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hlo_cli.interpreter.fpenv import hardware
from hlo_cli.interpreter.ops import convolution as conv
from hlo_cli.interpreter.ops.convert import F32

from .test_conv_nonfinite import _bits_equal, _sprinkle, cases
from .test_conv_strategies import _out_len


def _operands(case):
    wdims, sizes, (g, n, cg, o), eigen, seed, what, on_x, on_w, strategy, _ = case
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (g, n, cg, *sizes)).astype(np.float64)
    w = rng.integers(-4, 5, (g, o, cg, *[wd.size for wd in wdims])).astype(np.float64)
    what = what if "inf" in what else what + "+inf"          # the inf route's cases
    x = _sprinkle(rng, x, what) if on_x else x
    w = _sprinkle(rng, w, what) if on_w else w
    return x.astype(F32), w.astype(F32)


@settings(max_examples=200, deadline=None)
@given(cases(), st.booleans())
def test_one_sum_equals_the_indicator_counts(case, hw):
    """Same bits as the indicator-count route: NaN (and their bits), infs, signed zeros, values."""
    wdims, sizes, (g, n, cg, o), eigen, seed, what, on_x, on_w, strategy, _ = case
    assume(cg * int(np.prod([wd.size for wd in wdims])) >= 2)
    hw = hw and hardware() is not None
    x, w = _operands(case)
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))
    got = conv._nonfinite_conv(x, w, wdims, out_spatial, F32, hw, eigen, strategy)
    old = conv._inf_conv
    conv._inf_conv = lambda *a, **k: None
    try:
        want = conv._nonfinite_conv(x, w, wdims, out_spatial, F32, hw, eigen, strategy)
    finally:
        conv._inf_conv = old
    assert _bits_equal(got, want)


def test_the_one_sum_is_taken():
    """A 3x3 convolution with padding, NaN and +-inf on both sides, Eigen's rule: no indicator
    convolution of the inf products (one sum, one NaN-input count)."""
    from hlo_cli.ir.attributes import WindowDim
    rng = np.random.default_rng(1)
    x = (rng.random((1, 2, 3, 6, 6)) + 0.5).astype(F32)
    w = (rng.random((1, 4, 3, 3, 3)) + 0.5).astype(F32)
    for a in (x, w):
        for val in (np.nan, np.inf, -np.inf):
            a[rng.random(a.shape) < 0.05] = val
    wd = [WindowDim(size=3, padding_low=1, padding_high=1)] * 2
    assert conv._inf_conv(x, w, np.isnan(x), np.isinf(x), np.isnan(w), np.isinf(w), wd, (6, 6),
                          False, True) is not None
    # the loop emitter's rule (padding skipped) cannot be told from the sum: the count route
    assert conv._inf_conv(x, w, np.isnan(x), np.isinf(x), np.isnan(w), np.isinf(w), wd, (6, 6),
                          False, False) is None


def test_finite_sums_that_could_overflow_take_the_count_route():
    from hlo_cli.ir.attributes import WindowDim
    x = np.full((1, 1, 4, 5), 1e30, F32)
    x[0, 0, 0, 0] = np.inf
    w = np.full((1, 1, 4, 2), 1e10, F32)
    wd = [WindowDim(size=2)]
    assert conv._inf_conv(x, w, None, np.isinf(x), None, None, wd, (4,), False, True) is None
    out = conv._nonfinite_conv(x, w, wd, (4,), F32, False, True)
    assert out is None or np.isinf(out.reshape(-1)[0])     # None: the caller sums again in f64


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, max_side=9),
                  elements=st.sampled_from([0.0, -1.0, 2.5, -3e20, 7e25, np.inf, -np.inf, np.nan])),
       st.sampled_from([1.0, 3.0, 1e20, 1e25, np.inf]), st.integers(1, 64), st.booleans())
def test_count_at_least_counts_magnitudes(a, t, block, transpose):
    """Block by block over any strides, the count of |a| >= t (NaN never counted)."""
    a = a.T if transpose else a
    old = conv._COUNT_BLOCK
    conv._COUNT_BLOCK = block
    try:
        with np.errstate(invalid="ignore"):
            assert conv._count_at_least(a, t) == int(np.count_nonzero(np.abs(a) >= t))
    finally:
        conv._COUNT_BLOCK = old


# ---------------------------------------------------------------------------- against XLA CPU
# MobileNetV2's convolution kinds at a reduced batch (still past F32_BLAS_MIN_MACS: the f32 route):
# pointwise, depthwise strided with padding, and the depthwise weight gradient.

_CONVS = {
    "pointwise": ("f32[8,48,14,14]", "f32[16,48,1,1]", "f32[8,16,14,14]", "window={size=1x1}, "
                  "dim_labels=bf01_oi01->bf01"),
    "depthwise_s2": ("f32[8,48,28,28]", "f32[48,1,3,3]", "f32[8,48,14,14]",
                     "window={size=3x3 stride=2x2 pad=0_1x0_1}, dim_labels=bf01_oi01->bf01, feature_group_count=48"),
    "depthwise_pad": ("f32[8,48,14,14]", "f32[48,1,3,3]", "f32[8,48,14,14]",
                      "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=48"),
    "conv3x3": ("f32[8,16,14,14]", "f32[32,16,3,3]", "f32[8,32,14,14]",
                "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01"),
}


def _module(name):
    a, b, r, attrs = _CONVS[name]
    return (f"HloModule {name}\nENTRY e {{\n  p0 = {a} parameter(0)\n  p1 = {b} parameter(1)\n"
            f"  ROOT c = {r} convolution(p0, p1), {attrs}\n}}\n")


def _mixed(rng, shape, what):
    a = (rng.random(shape) + 0.5).astype(np.float32) * np.where(rng.random(shape) < 0.5, 1, -1).astype(np.float32)
    a[rng.random(shape) < 0.05] = 0.0
    if "sub" in what:
        a[rng.random(shape) < 0.05] = np.float32(1e-40)
    for val, on in ((np.nan, "nan" in what), (np.inf, True), (-np.inf, True)):
        if on:
            a[rng.random(shape) < 0.01] = val
    return a


@pytest.mark.slow
@pytest.mark.parametrize("what", ["inf", "nan+inf", "inf+sub"])
@pytest.mark.parametrize("name", sorted(_CONVS))
def test_nonfinite_positions_match_xla(name, what):
    pytest.importorskip("jax")
    from hlo_cli.interpreter import run
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import run_with_xla
    text = _module(name)
    module = parse(text)
    rng = np.random.default_rng(sum(map(ord, name + what)))
    args = [_mixed(rng, tuple(p.shape.dims), what) for p in module.entry_computation.parameters]
    want = np.asarray(run_with_xla(text, args)[0])
    res = run(module, *args)
    got = np.asarray(res[0] if isinstance(res, (tuple, list)) else res)
    for test in (np.isnan, np.isposinf, np.isneginf):
        assert np.array_equal(test(got), test(want)), (name, what, test.__name__)
    assert np.count_nonzero(~np.isfinite(want)) > 0
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-4)
    if "nan" not in what:                      # every NaN made by inf * 0 or inf - inf: x86's default
        assert np.array_equal(got[np.isnan(got)].view(np.uint32), want[np.isnan(want)].view(np.uint32))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_CONVS))
def test_count_route_reads_subnormals_as_zeros(name, monkeypatch):
    """The indicator-count route (the fallback) reads zeros with DAZ as the sum does, with the
    processor's flags too: a subnormal times inf is 0 * inf, NaN, as in XLA."""
    monkeypatch.setattr(conv, "_inf_conv", lambda *a, **k: None)
    test_nonfinite_positions_match_xla(name, "inf+sub")
