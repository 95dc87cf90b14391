"""The convolution's two evaluation orders give the same sums: one gather + product per kernel tap
(few taps: a forward convolution) and one gather + product per output position (few outputs: a
weight gradient, whose kernel is an activation gradient).  Integers and preds exactly; floats,
accumulated in f64 from f32 values, to the f32 result's last bit (the f64 sums differ in order
only)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter.ops.convolution import _conv_by_output, _conv_by_tap
from hlo_cli.ir.attributes import WindowDim


def _out_len(size_in, wd):
    dil_in = (size_in - 1) * wd.base_dilation + 1 if size_in else 0
    span = (wd.size - 1) * wd.window_dilation + 1
    n = dil_in + wd.padding_low + wd.padding_high - span
    return n // wd.stride + 1 if n >= 0 else 0


@st.composite
def convs(draw):
    ns = draw(st.integers(1, 2))
    wdims, sizes = [], []
    for _ in range(ns):
        size_in = draw(st.integers(1, 7))
        wd = WindowDim(size=draw(st.integers(1, 5)), stride=draw(st.integers(1, 3)),
                       padding_low=draw(st.integers(-1, 3)), padding_high=draw(st.integers(-1, 3)),
                       window_dilation=draw(st.integers(1, 2)), base_dilation=draw(st.integers(1, 2)),
                       window_reversal=draw(st.booleans()))
        if _out_len(size_in, wd) <= 0:
            wd = WindowDim(size=1)
        wdims.append(wd)
        sizes.append(size_in)
    g, n, cg, o = (draw(st.integers(1, 3)) for _ in range(4))
    kind = draw(st.sampled_from(["f64", "i64", "pred"]))
    eigen = draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return wdims, sizes, (g, n, cg, o), kind, eigen, seed


@settings(max_examples=150, deadline=None)
@given(convs())
def test_by_output_equals_by_tap(case):
    wdims, sizes, (g, n, cg, o), kind, eigen, seed = case
    rng = np.random.default_rng(seed)
    xshape = (g, n, cg, *sizes)
    wshape = (g, o, cg, *[wd.size for wd in wdims])
    if kind == "f64":       # f32 values, as the interpreter accumulates f32 convolutions
        x = rng.standard_normal(xshape).astype(np.float32).astype(np.float64)
        w = rng.standard_normal(wshape).astype(np.float32).astype(np.float64)
    elif kind == "i64":
        x = rng.integers(-9, 10, xshape).astype(np.int64)
        w = rng.integers(-9, 10, wshape).astype(np.int64)
    else:
        x = rng.random(xshape) < 0.3
        w = rng.random(wshape) < 0.3
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))
    p = int(np.prod(out_spatial))
    by_tap = _conv_by_tap(x, w, wdims, out_spatial, eigen, np.zeros((g, n, o, p), x.dtype))
    by_out = _conv_by_output(x, w, wdims, out_spatial, eigen)
    assert by_tap.shape == by_out.shape
    if kind == "f64":
        a, b = by_tap.astype(np.float32), by_out.astype(np.float32)
        np.testing.assert_array_max_ulp(a, b, maxulp=1)
        assert not np.signbit(b[b == 0]).any()                  # a zero sum is +0, as the tap loop gives
    else:
        np.testing.assert_array_equal(by_tap, by_out)


def test_weight_gradient_shape_takes_few_products():
    """A 3x3 weight gradient over a 40x40 activation: 9 products, not 1,444."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 2, 42, 42)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((1, 3, 2, 40, 40)).astype(np.float32).astype(np.float64)
    wdims = [WindowDim(size=40), WindowDim(size=40)]
    got = _conv_by_output(x, w, wdims, (3, 3), eigen=True)
    want = np.einsum("gncij,gocij->gno", x[..., 1:41, 2:42], w)
    np.testing.assert_allclose(got[..., 1, 2], want, rtol=1e-12)
