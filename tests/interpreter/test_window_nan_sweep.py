"""Max/min pooling whose results hold many NaN finds their bits (XLA's: the first NaN in fold order,
its sign merged with the running result's) in one more sweep over the window positions
(computations._nan_windows) instead of one gather per NaN output: the same bits as the gather's
exact fold, on hostile inputs (NaN of both signs and payloads, +-inf, +-0, subnormals), for
maximum and minimum written either way round, with padding, strides and dilations; and XLA's bits
on the window goldens and on NaN-filled and mixed pooling inputs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import computations as C
from hlo_cli.ir.attributes import WindowDim

from .test_conv_strategies import convs
from .test_window_xla import CASES, _leaves, _mode, assert_same, load_golden, parse, run_module

_HOSTILE = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.5, -2.5, 3.0],
                    np.float32)
_PAYLOAD = np.array([0x7FC01234, 0xFFC00F00], np.uint32).view(np.float32)


@st.composite
def windows(draw):
    """(operand shape, window dims): test_conv_strategies' convolution windows (padding from -1,
    strides, both dilations)."""
    wdims, sizes = draw(convs())[:2]
    return tuple(sizes), [WindowDim(size=w.size, stride=w.stride, padding_low=w.padding_low,
                                    padding_high=w.padding_high, window_dilation=w.window_dilation,
                                    base_dilation=w.base_dilation) for w in wdims]


@settings(max_examples=200, deadline=None)
@given(windows(), st.sampled_from(["maximum", "minimum"]), st.booleans(), st.integers(0, 2**31 - 1),
       st.sampled_from([np.float32, np.float64]), st.sampled_from([-np.inf, np.inf, 0.0, -0.0, np.nan]))
def test_nan_sweep_equals_the_exact_fold(win, op, swapped, seed, dt, init):
    shape, wdims = win
    rng = np.random.default_rng(seed)
    pool = np.concatenate([_HOSTILE, _PAYLOAD])
    x = pool[rng.integers(0, pool.size, shape)].astype(dt)
    outs = tuple(C._out_len(n, w) for n, w in zip(shape, wdims))
    init = np.asarray(init, dt)
    old = C.NAN_SWEEP_SHARE
    try:
        C.NAN_SWEEP_SHARE = 0                                 # never: one gather per NaN output
        want = C._minmax_sweep((op, swapped), x, init, wdims, outs)
        C.NAN_SWEEP_SHARE = 10 ** 12                          # whenever a result is NaN
        got = C._minmax_sweep((op, swapped), x, init, wdims, outs)
    finally:
        C.NAN_SWEEP_SHARE = old
    u = np.uint32 if dt == np.float32 else np.uint64
    assert np.array_equal(got.view(u), want.view(u))


@pytest.mark.parametrize("path", [p for p in CASES if p.stem.startswith("rw_")],
                         ids=[p.stem for p in CASES if p.stem.startswith("rw_")])
def test_window_goldens_through_the_sweep(path, monkeypatch):
    monkeypatch.setattr(C, "NAN_SWEEP_SHARE", 10 ** 12)
    module = parse(path.read_text())
    args, want = load_golden(path, module)
    for g, w in zip(_leaves(run_module(module, args)), want):
        assert_same(g, w, _mode(path), path.stem)


_POOL = """HloModule pool
{comp} {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] {op}({args})
}}

ENTRY e {{
  p0 = f32[4,8,24,24] parameter(0)
  c = f32[] constant({init})
  ROOT r = f32[4,8,12,12] reduce-window(p0, c), window={{size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}}, to_apply={comp}
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("fill", ["nan", "mixed"])
@pytest.mark.parametrize("op,args,init", [("maximum", "a, b", "-inf"), ("minimum", "a, b", "inf"),
                                          ("maximum", "b, a", "-inf")])
def test_nan_pooling_matches_xla(fill, op, args, init):
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    text = _POOL.format(comp="red", op=op, args=args, init=init)
    module = parse(text)
    rng = np.random.default_rng(7)
    x = (rng.random((4, 8, 24, 24)) - 0.5).astype(np.float32)
    if fill == "nan":
        x[...] = np.nan
        x[rng.random(x.shape) < 0.3] = -np.nan
    else:
        for val in (np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-40):
            x[rng.random(x.shape) < 0.03] = val
    want = np.asarray(run_with_xla(text, [x])[0])
    got = _leaves(run_module(module, [x]))[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
