"""f32 convolutions whose operands mix NaN, +inf, -inf and zeros find x's NaN and inf without
dense masks (_scan_route: one blocked pass over x's magnitude bits, one channel maximum per
pixel), then sum as before (_nan_conv / _inf_conv).  The result is the dense route's, bit for
bit: NaN positions and bits (several payloads and signs, x's first NaN in C order), infs, signed
zeros, values; large finite operands and an all-NaN x leave the scan to the dense route."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hlo_cli.interpreter.fpenv import hardware
from hlo_cli.interpreter.kernels import flush
from hlo_cli.interpreter.ops import convolution as conv
from hlo_cli.interpreter.ops.convert import F32
from hlo_cli.ir.attributes import WindowDim

from .test_conv_nonfinite import _bits_equal, cases
from .test_conv_strategies import _out_len

# quiet NaNs with different payloads and signs: which one reaches an output is a matter of bits
_NANS = np.array([0x7FC00000, 0x7FC00123, 0xFFC00456, 0x7F800001], np.uint32).view(np.float32)


def _sprinkled(rng, shape, hostile: bool, big: bool):
    a = rng.integers(-4, 5, shape).astype(np.float32)
    a[rng.random(shape) < 0.1] = 0.0
    a[rng.random(shape) < 0.05] = -0.0
    a[rng.random(shape) < 0.05] = np.float32(1e-40)          # subnormal: a zero under DAZ
    if big:
        a[rng.random(shape) < 0.05] = np.float32(3e37)       # a finite partial sum could overflow
    if hostile:
        for val in (np.inf, -np.inf):
            a[rng.random(shape) < 0.06] = val
        at = rng.random(shape) < 0.06
        a[at] = rng.choice(_NANS, int(np.count_nonzero(at)))
    return a


def _dense(call):
    old = conv._scan_route
    conv._scan_route = lambda *a, **k: None
    try:
        return call()
    finally:
        conv._scan_route = old


@settings(max_examples=250, deadline=None)
@given(cases(), st.booleans(), st.sampled_from([(True, True), (True, False), (False, True)]),
       st.booleans())
def test_scan_route_equals_the_dense_route(case, hw, hostile, big):
    """Random small convolutions (padding, strides, dilations, groups, every strategy) with NaN,
    +-inf, zeros and subnormals in both operands: the same bits with and without the scan."""
    wdims, sizes, (g, n, cg, o), eigen, seed, _, _, _, strategy, _ = case
    hw = hw and hardware() is not None
    rng = np.random.default_rng(seed)
    x = _sprinkled(rng, (g, n, cg, *sizes), hostile[0], big and seed % 3 == 0)
    w = _sprinkled(rng, (g, o, cg, *[wd.size for wd in wdims]), hostile[1], big and seed % 3 == 1)
    if not hw:
        x, w = flush(x), flush(w)
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))

    def run():
        return conv._nonfinite_conv(x, w, wdims, out_spatial, F32, hw, eigen, strategy)
    got, want = run(), _dense(run)
    assert (got is None) == (want is None)
    if got is not None:
        assert _bits_equal(got, want)


def _pointwise(rng, n=2, c=12, o=5, side=6):
    x = (rng.random((1, n, c, side, side)) + 0.5).astype(np.float32)
    w = (rng.random((1, o, c, 1, 1)) + 0.5).astype(np.float32)
    for a in (x, w):
        for val in (np.nan, np.inf, -np.inf):
            a[rng.random(a.shape) < 0.03] = val
    return x, w


def test_mixed_pointwise_takes_the_scan():
    """MobileNetV2's mixed 1x1 case (NaN and +-inf in both operands) never builds x's masks."""
    rng = np.random.default_rng(3)
    x, w = _pointwise(rng)
    x[0, 0, 0, 0, 0] = 1.0                       # the all-NaN check reads the first element
    wd = [WindowDim(size=1)] * 2
    with np.errstate(all="ignore"):
        out = conv._scan_route(x, w, wd, (6, 6), False, True, None)
    assert out is not None
    assert _bits_equal(out, _dense(lambda: conv._nonfinite_conv(x, w, wd, (6, 6), F32, False, True)))


def test_the_scan_leaves_large_finite_and_all_nan_x_to_the_dense_route():
    rng = np.random.default_rng(4)
    wd = [WindowDim(size=1)] * 2
    x, w = _pointwise(rng)
    x[0, 0, 0, 0, 0] = 1.0
    x[0, 1, 3, 2, 2] = np.float32(1e30)          # |x| past the bound: a finite sum could overflow
    assert conv._scan_route(x, w, wd, (6, 6), False, True, None) is None
    x[...] = np.nan                              # all NaN: the dense route's shortcut
    assert conv._scan_route(x, w, wd, (6, 6), False, True, None) is None
    out = conv._nonfinite_conv(x, w, wd, (6, 6), F32, False, True)
    assert np.isnan(out).all()


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=3, max_dims=5, max_side=7),
                  elements=st.sampled_from([0.0, -0.0, -1.0, 2.5, -3e20, 7e25, 3.4e38, np.inf, -np.inf,
                                            np.nan])),
       st.sampled_from([1.0, 3.0, 1e20, 1e25, 3e38]), st.integers(1, 64), st.booleans())
def test_x_scan_finds_large_finite_infs_and_nan_pixels(a, t, block, transpose):
    """Block by block over any strides (every blocking depth): whether a finite |x| >= t, else
    whether x holds +-inf and which pixels (G, N, 1, *S) have a NaN among their channels."""
    a = a.transpose(1, 0, *range(2, a.ndim)) if transpose else a
    old = conv._COUNT_BLOCK
    conv._COUNT_BLOCK = block
    try:
        with np.errstate(invalid="ignore"):
            large, infs, pix = conv._x_scan(a, t)
            assert large == bool((np.isfinite(a) & (np.abs(a) >= np.float32(t))).any())
            if not large:
                assert infs == bool(np.isinf(a).any())
                assert np.array_equal(pix, np.isnan(a).any(axis=2, keepdims=True))
    finally:
        conv._COUNT_BLOCK = old


@settings(max_examples=200, deadline=None)
@given(cases(), st.floats(0.0, 1.0))
def test_window_any_is_a_count_convolution_above_zero(case, share):
    """x's NaN pixels spread over the windows (padding, strides, dilations, reversal, groups):
    the positive outputs of the convolution of the mask with a kernel of ones."""
    wdims, sizes, (g, n, _, _), _, seed, *_ = case
    m = np.random.default_rng(seed).random((g, n, *sizes)) < share
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))
    ones = np.ones((g, 1, 1) + tuple(wd.size for wd in wdims))
    want = conv._fast_conv(m[:, :, None].astype(np.float64), ones, wdims, out_spatial,
                           np.dtype(np.float64), False) > 0                 # (N, *out, G, 1)
    got = conv._window_any(m, wdims, out_spatial)                            # (G, N, *out)
    assert np.array_equal(np.moveaxis(got, 0, -1)[..., None], want)
