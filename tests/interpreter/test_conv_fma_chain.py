"""XLA CPU's 1x1 f32 convolutions as in-order FMA chains (ops/convolution.py, _fma_chain): the
blocked, threaded chain equals a plain step-by-step chain of elementwise.fma (hypothesis, finite
and NaN/Inf-filled), exact on small integers, the class gate, and XLA bit for bit (slow: live)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli.interpreter.ops import convolution as CV
from hlo_cli.interpreter.ops.elementwise import fma
from hlo_cli.ir.attributes import WindowDim

F32 = np.float32


def _plain_chain(x, w):
    """x (N, K, H, W), w (O, K) -> (N, H, W, O): acc = fma(x_k, w_k, acc) from +0, k in order."""
    xs = np.moveaxis(x, 1, -1)
    shape = xs.shape[:-1] + (w.shape[0],)
    acc = np.zeros(shape, F32)
    for k in range(x.shape[1]):
        acc = fma(np.ascontiguousarray(np.broadcast_to(xs[..., k:k + 1], shape)),
                  np.ascontiguousarray(np.broadcast_to(w[:, k], shape)), acc)
    return acc


def _values(seed, shape, hostile, scale=1.0):
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(shape) * scale).astype(F32)
    if hostile:
        flat = v.reshape(-1)
        for bad in (np.nan, np.inf, -np.inf, 1e-40):
            flat[rng.random(flat.size) < hostile] = bad
    return v


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(2, 16), st.integers(1, 9), st.integers(2, 40),
       st.sampled_from([0.0, 0.05]), st.sampled_from([1.0, 1e20]), st.integers(0, 2**31 - 1))
def test_blocked_chain_equals_the_plain_chain(n, k, h, o, hostile, scale, seed):
    x = _values(seed, (n, k, h, h), hostile, scale)
    w = _values(seed + 1, (o, k), hostile, scale)
    old = CV.FMA_CHAIN_BLOCK
    CV.FMA_CHAIN_BLOCK = 3 * o                  # several blocks even for small shapes
    try:
        got = CV._fma_chain(x[None], w[None, :, :, None, None], False)
    finally:
        CV.FMA_CHAIN_BLOCK = old
    want = _plain_chain(x, w)
    got = got.reshape(want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 16), st.integers(2, 20), st.integers(0, 2**31 - 1))
def test_small_integers_sum_exactly(k, o, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, (2, k, 3, 3)).astype(F32)
    w = rng.integers(-50, 50, (o, k)).astype(F32)
    got = CV._fma_chain(x[None], w[None, :, :, None, None], False).reshape(2, 3, 3, o)
    want = np.einsum("nkhw,ok->nhwo", x.astype(np.float64), w.astype(np.float64))
    assert np.array_equal(got, want.astype(F32))


def _gate(k, o, **wd):
    x = np.zeros((1, 2, k, 4, 4), F32)
    w = np.zeros((1, o, k, 1, 1), F32)
    dims = (WindowDim(size=1, **wd), WindowDim(size=1))
    return CV._pointwise_chain(x, w, dims, np.dtype(F32))


def test_the_chain_class():
    assert _gate(16, 96) and _gate(2, 25) and _gate(16, 28) and _gate(16, 48)
    assert not any(_gate(16, o) for o in (1, 2, 4, 8, 12, 16, 20, 24, 40))  # other kernels
    assert not _gate(1, 96) and not _gate(CV.FMA_CHAIN_MAX_FEATURES + 1, 96)
    assert not _gate(16, 96, stride=2) and not _gate(16, 96, padding_low=1)
    assert not CV._pointwise_chain(np.zeros((1, 2, 16, 4, 4)), np.zeros((1, 96, 16, 1, 1)),
                                   (WindowDim(size=1),), np.dtype(np.float64))


@pytest.mark.slow
@pytest.mark.parametrize("b,k,hw,o,hostile", [(4, 16, 28, 96, 0.0), (4, 16, 28, 96, 0.003), (2, 3, 28, 32, 0.0),
                                              (2, 16, 14, 28, 0.0), (2, 8, 14, 25, 0.01), (8, 16, 56, 48, 0.0)])
def test_chain_is_xla_bit_for_bit(b, k, hw, o, hostile):
    pytest.importorskip("jax")
    from hlo_cli.interpreter import run
    from hlo_cli.parser import parse
    from hlo_cli.tools.xla_reference import XlaExecutable
    text = f"""HloModule c
ENTRY e {{
  x = f32[{b},{k},{hw},{hw}] parameter(0)
  w = f32[{o},{k},1,1] parameter(1)
  ROOT c = f32[{b},{o},{hw},{hw}] convolution(x, w), window={{size=1x1}}, dim_labels=bf01_oi01->bf01
}}"""
    x = _values(3, (b, k, hw, hw), hostile)
    w = _values(4, (o, k, 1, 1), 0.0)
    want = np.asarray(XlaExecutable(text)([x, w])[0])
    got = np.asarray(run(parse(text, "c"), x, w))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
