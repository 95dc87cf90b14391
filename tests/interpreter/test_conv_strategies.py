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


# ---------------------------------------------------------------------------- fast strategies
# _fast_conv (phases, one padded copy, im2col GEMM or depthwise multiply-adds) against the tap
# loop: integers exactly, f32 values summed in f64 to the f32 result's last bit.

def _fast_as_gnop(x, w, wdims, out_spatial, strategy=None):
    from hlo_cli.interpreter.ops.convolution import _fast_conv
    out = _fast_conv(x, w, wdims, out_spatial, x.dtype, False, strategy)     # (N, *out, G, O)
    ns = len(wdims)
    return np.moveaxis(np.moveaxis(out, ns + 1, 0), -1, 2)               # (G, N, O, *out)


@st.composite
def fast_convs(draw):
    wdims, sizes, (g, n, cg, o), _, _, seed = draw(convs())
    kind = draw(st.sampled_from(["f64", "i64"]))
    depthwise = draw(st.booleans())
    if depthwise:                 # one input feature per group, many groups: the multiply-add path
        g, cg, o = draw(st.integers(2, 5)), 1, draw(st.integers(1, 2))
    strategy = draw(st.sampled_from([None, "gemm", "depthwise", "products", "reduce"]))
    return wdims, sizes, (g, n, cg, o), kind, seed, strategy


@settings(max_examples=300, deadline=None)
@given(fast_convs())
def test_fast_equals_by_tap(case):
    wdims, sizes, (g, n, cg, o), kind, seed, strategy = case
    rng = np.random.default_rng(seed)
    xshape = (g, n, cg, *sizes)
    wshape = (g, o, cg, *[wd.size for wd in wdims])
    if kind == "f64":
        x = rng.standard_normal(xshape).astype(np.float32).astype(np.float64)
        w = rng.standard_normal(wshape).astype(np.float32).astype(np.float64)
    else:
        x = rng.integers(-9, 10, xshape).astype(np.int64)
        w = rng.integers(-9, 10, wshape).astype(np.int64)
    # any strides: the fast path reads views as they come (NHWC, NCHW, grouped reshapes)
    layout = rng.integers(3)
    if layout == 1:             # channels innermost, groups outermost
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 2, -1)), -1, 2)
    elif layout == 2:           # NHWC: batch outermost, then space, groups, channels
        perm = [1, *range(3, x.ndim), 0, 2]
        x = np.ascontiguousarray(x.transpose(perm)).transpose(np.argsort(perm))
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))
    p = int(np.prod(out_spatial))
    want = _conv_by_tap(x, w, wdims, out_spatial, True, np.zeros((g, n, o, p), x.dtype))
    got = _fast_as_gnop(x, w, wdims, out_spatial, strategy)
    assert got.shape == want.shape
    if kind == "f64":
        np.testing.assert_array_max_ulp(got.astype(np.float32), want.astype(np.float32), maxulp=1)
    else:
        np.testing.assert_array_equal(got, want)


def test_fast_bits_do_not_depend_on_threads(monkeypatch):
    """Chunks of the patch matrix and depthwise blocks are cut from the shape alone: one thread
    and two give the same f32 bits (many small chunks here, through a tiny budget)."""
    from hlo_cli.interpreter import parallel
    from hlo_cli.interpreter.ops import convolution as conv
    monkeypatch.setattr(conv, "PATCH_BUDGET", 2048)
    monkeypatch.setattr(conv, "DEPTHWISE_BLOCK", 16)
    rng = np.random.default_rng(1)
    wdims = [WindowDim(size=3, stride=2, padding_low=1, padding_high=1)] * 2
    for (g, cg, o), strategy in (((1, 8, 16), "gemm"), ((6, 1, 1), "depthwise"), ((2, 8, 2), "products"),
                                 ((6, 8, 1), "reduce")):
        x = rng.standard_normal((g, 3, cg, 17, 17)).astype(np.float32)
        w = rng.standard_normal((g, o, cg, 3, 3)).astype(np.float32)
        monkeypatch.setattr(parallel, "_threads", 2)
        two = conv._fast_conv(x, w, wdims, (9, 9), np.dtype(np.float32), False, strategy)
        monkeypatch.setattr(parallel, "_threads", 1)
        one = conv._fast_conv(x, w, wdims, (9, 9), np.dtype(np.float32), False, strategy)
        np.testing.assert_array_equal(one.view(np.int32), two.view(np.int32))


def test_non_finite_operands_take_the_exact_path():
    """An inf in the kernel of an f64 convolution (XLA's loop emitter: padding skipped): the fast
    path would form 0 * inf = NaN on the padding, notices a non-finite result and the exact loop
    runs instead: the inf tap on padding is skipped, as XLA does, no NaN.  Large f32 ones too
    (f32 BLAS path; Eigen multiplies padding, so NaN there)."""
    from hlo_cli.interpreter import run
    from hlo_cli.parser import parse
    for t, n, c in (("f64", 1, 1), ("f32", 4, 64)):
        text = (f"HloModule m\nENTRY e {{\n  x = {t}[{n},9,9,{c}] parameter(0)\n  k = {t}[3,3,{c},{c}] parameter(1)\n"
                f"  ROOT c = {t}[{n},9,9,{c}] convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, "
                "dim_labels=b01f_01io->b01f\n}\n")
        dt = np.float64 if t == "f64" else np.float32
        x = np.ones((n, 9, 9, c), dt)
        k = np.ones((3, 3, c, c), dt)
        k[0, 0, 0, 0] = np.inf
        out = np.asarray(run(parse(text), x, k))
        corner = out[0, 0, 0, 0]
        if t == "f64":
            assert corner == 4.0            # the inf tap lies on padding there: skipped
        else:
            assert np.isnan(corner)
        assert out[0, 1, 1, 0] == np.inf and np.isfinite(out[0, 1, 1, c - 1]) == (c > 1)


def test_single_group_output_is_laid_out_like_the_input():
    """One feature group: the result's features lie where the input's do (NHWC: innermost, NCHW:
    outside the planes), not outermost (a size-1 group axis has the whole input's stride)."""
    from hlo_cli.interpreter.ops.convolution import _fast_conv
    rng = np.random.default_rng(2)
    wdims = [WindowDim(size=3, padding_low=1, padding_high=1)] * 2
    w = rng.standard_normal((1, 8, 4, 3, 3))
    nhwc = rng.standard_normal((2, 6, 6, 4))
    # as eval_convolution makes it: (N, C, H, W) reshaped to (1, N, C, H, W)
    for x, inner in ((nhwc.transpose(0, 3, 1, 2).reshape(1, 2, 4, 6, 6), "features"),
                     (np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)).reshape(1, 2, 4, 6, 6), "planes")):
        for strategy in ("gemm", "products"):
            out = _fast_conv(x, w, wdims, (6, 6), x.dtype, False, strategy)     # (N, H, W, G, O)
            strides = [abs(s) for s in out.strides]
            if inner == "features":
                assert strides[4] == out.itemsize and strides[0] > strides[1] > strides[2] > strides[4]
            else:
                assert strides[2] == out.itemsize and strides[0] > strides[4] > strides[1] > strides[2]
