"""Convolutions of operands holding NaN, +-inf and -0 take the fast strategies (sums over the
operands with their non-finite values zeroed, then the outputs XLA's rules make NaN/+inf/-inf
repaired from indicator convolutions); they give the exact tap loop's bits: NaN positions, infs,
signed zeros and finite values (small integers: every sum exact in any order), and the NaN bits
whenever they do not depend on the order of the sum (one NaN payload in the operands and no inf,
or infs and no NaN)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter.ops import convolution as conv
from hlo_cli.interpreter.ops.convolution import _conv_by_tap, _nonfinite_conv
from hlo_cli.interpreter.ops.convert import F32, F64

from .test_conv_strategies import _out_len, convs

_PAYLOAD_NAN = np.array([0x7FF8000000000123], np.uint64).view(np.float64)[0]


def _sprinkle(rng, a, what):
    """`a` with NaN (one payload), +-inf and -0 put at random places (`what` chooses which)."""
    a = a.copy()
    for val, on in ((_PAYLOAD_NAN, "nan" in what), (np.inf, "inf" in what), (-np.inf, "inf" in what),
                    (-0.0, True), (0.0, True)):
        if on:
            a[rng.random(a.shape) < 0.08] = val
    return a


@st.composite
def cases(draw):
    wdims, sizes, (g, n, cg, o), _, eigen, seed = draw(convs())
    what = draw(st.sampled_from(["nan", "inf", "nan+inf", ""]))
    on_x, on_w = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
    strategy = draw(st.sampled_from([None, "gemm", "depthwise", "products", "reduce"]))
    f32 = draw(st.booleans())              # the sums in f32 (BLAS sgemm), as large f32 convolutions
    return wdims, sizes, (g, n, cg, o), eigen, seed, what, on_x, on_w, strategy, f32


def _bits_equal(got, want):
    u = {4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    return got.dtype == want.dtype and np.array_equal(got.view(u), want.view(u))


@settings(max_examples=300, deadline=None)
@given(cases())
def test_repaired_fast_path_equals_the_tap_loop(case):
    wdims, sizes, (g, n, cg, o), eigen, seed, what, on_x, on_w, strategy, f32 = case
    terms = cg * int(np.prod([wd.size for wd in wdims]))
    assume(terms >= 2)                     # one-term sums are multiplies (the exact path keeps -0)
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (g, n, cg, *sizes)).astype(np.float64)
    w = rng.integers(-4, 5, (g, o, cg, *[wd.size for wd in wdims])).astype(np.float64)
    if on_x:
        x = _sprinkle(rng, x, what)
    if on_w:
        w = _sprinkle(rng, w, what)
    out_spatial = tuple(_out_len(s, wd) for s, wd in zip(sizes, wdims))
    p = int(np.prod(out_spatial))
    with np.errstate(all="ignore"):
        want = _conv_by_tap(x, w, wdims, out_spatial, eigen, np.zeros((g, n, o, p), x.dtype)) + 0.0
    if f32:
        got = _nonfinite_conv(x.astype(F32), w.astype(F32), wdims, out_spatial, F32, False, eigen, strategy)
        want = want.astype(F32)
    else:
        got = _nonfinite_conv(x, w, wdims, out_spatial, F64, False, eigen, strategy)
    ns = len(wdims)
    got = np.moveaxis(np.moveaxis(got, ns + 1, 0), -1, 2)             # (G, N, O, *out)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    assert _bits_equal(got[fin], want[fin])
    if what in ("nan", "inf"):
        assert _bits_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(cases())
def test_one_count_per_kind_when_digits_do_not_fit(case):
    """The fallback of the digit-packed inf counts (too many terms): one convolution per kind."""
    old = conv._DIGITS_MAX
    conv._DIGITS_MAX = 1
    try:
        test_repaired_fast_path_equals_the_tap_loop.hypothesis.inner_test(case)
    finally:
        conv._DIGITS_MAX = old


def test_every_output_nan_skips_the_sum(monkeypatch):
    """An all-NaN input makes every output NaN (its payload): nothing is summed."""
    from hlo_cli.ir.attributes import WindowDim
    calls = []
    real = conv._fast_conv

    def spy(x, w, *a, **k):
        calls.append(x.shape)
        return real(x, w, *a, **k)
    monkeypatch.setattr(conv, "_fast_conv", spy)
    x = np.full((1, 2, 3, 6, 6), _PAYLOAD_NAN)
    w = np.ones((1, 4, 3, 3, 3))
    out = _nonfinite_conv(x, w, [WindowDim(size=3, padding_low=1, padding_high=1)] * 2, (6, 6), F64, False, True)
    assert out.shape == (2, 6, 6, 1, 4)
    assert _bits_equal(out, np.full(out.shape, _PAYLOAD_NAN))
    assert calls == []


@pytest.mark.parametrize("eigen", [True, False])
def test_inf_kernel_over_padding(eigen):
    """Eigen's kernel multiplies padding as zeros (0 * inf = NaN, x86's default NaN); the loop
    emitter skips padding."""
    from hlo_cli.ir.attributes import WindowDim
    x = np.ones((1, 1, 1, 4))
    w = np.array([np.inf, 1.0, 1.0]).reshape(1, 1, 1, 3)
    wd = [WindowDim(size=3, padding_low=1, padding_high=1)]
    got = _nonfinite_conv(x, w, wd, (4,), F64, False, eigen).reshape(4)
    assert np.isnan(got[0]) == eigen
    assert (got[1:] == np.inf).all()
    if eigen:
        assert got[:1].view(np.uint64)[0] == 0xFFF8000000000000
    else:
        assert got[0] == 2.0


# ---------------------------------------------------------------------------- against XLA CPU
# The exact cases of test_conv_xla (small integers: every finite sum exact) with NaN (jnp.nan's
# bits), +-inf and -0 sprinkled into the operands: NaN, +inf and -inf where XLA has them, the other
# values bit for bit, and the NaN bits too where they cannot depend on the summation order (NaN
# alone, or inf alone).

_VARIANTS = {"nan_x": ("nan", True, False), "inf_x": ("inf", True, False), "inf_w": ("inf", False, True),
             "nan_w": ("nan", False, True), "both": ("nan+inf", True, True)}


def _sprinkle_typed(rng, a, what):
    a = np.array(a)
    f = a.astype(np.float32)
    for val, on in ((np.nan, "nan" in what), (np.inf, "inf" in what), (-np.inf, "inf" in what), (-0.0, True)):
        if on:
            f[rng.random(f.shape) < 0.05] = val
    return f.astype(a.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(_VARIANTS))
def test_nonfinite_bits_match_xla(variant):
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla

    from .test_conv_xla import EXACT, _load, _ours
    what, on_x, on_w = _VARIANTS[variant]
    bad = []
    for name in EXACT:
        text, args, _ = _load(name)
        if np.asarray(args[0]).dtype.kind in "iu":
            continue
        rng = np.random.default_rng(sum(map(ord, name + variant)))
        args = [_sprinkle_typed(rng, a, what) if on else np.asarray(a) for a, on in zip(args, (on_x, on_w))]
        want = np.asarray(run_with_xla(text, args)[0]).astype(np.float32)
        got = _ours(text, args).astype(np.float32)
        same = (np.array_equal(np.isnan(got), np.isnan(want))
                and np.array_equal(got[~np.isnan(want)].view(np.uint32), want[~np.isnan(want)].view(np.uint32)))
        if same and what != "nan+inf":
            same = np.array_equal(got.view(np.uint32), want.view(np.uint32))
        if not same:
            bad.append(name)
    assert not bad, f"{variant}: differs from XLA on {bad}"
