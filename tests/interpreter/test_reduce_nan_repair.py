"""A max/min reduce's fast result keeps its finite outputs and repairs only its NaN outputs (the
winning NaN and its merged sign, a few passes over their rows) and its zero/subnormal outputs (the
rule on their rows): bit for bit the rule's closed form, on NaN/Inf-filled and hostile rows, for
maximum and minimum written either way round."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import computations as C
from hlo_cli.interpreter.kernels import TINY
from hlo_cli.interpreter.ops import reduction

_HOSTILE = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.5, -2.5, 3.0],
                    np.float32)
_PAYLOAD = np.array([0x7FC01234, 0xFFC00F00], np.uint32).view(np.float32)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.integers(1, 32), st.sampled_from(["maximum", "minimum"]), st.booleans(),
       st.integers(0, 2**31 - 1), st.sampled_from([np.float32, np.float64]),
       st.sampled_from([-np.inf, np.inf, 0.0, -0.0, 2.0]), st.sampled_from([0.02, 0.3, 1.0]))
def test_repaired_fast_result_equals_the_rule(o, n, kind, swapped, seed, dt, init, share):
    rng = np.random.default_rng(seed)
    pool = np.concatenate([_HOSTILE, _PAYLOAD]).astype(dt)
    x = (rng.standard_normal((o, n)) * 4).astype(dt)
    hostile = rng.random((o, n)) < share
    x[hostile] = pool[rng.integers(0, pool.size, int(hostile.sum()))]
    i = np.asarray(init, dt)
    uf = np.maximum if kind == "maximum" else np.minimum
    with np.errstate(all="ignore"):
        r = uf.reduce(x, axis=1, initial=i[()])
        want = C.fold_minmax_rows(kind, swapped, i[()], x)
        got = reduction._minmax_repair(kind, swapped, x, i, r, True, (0, 1), TINY[np.dtype(dt)],
                                       lambda: want)
    u = np.uint32 if dt == np.float32 else np.uint64
    assert np.array_equal(np.asarray(got).view(u), want.view(u))


def test_nan_filled_rows_repair_in_place_of_the_whole_rule():
    x = np.full((64, 49), np.nan, np.float32)
    x[::2, 3] = -np.nan
    x[1::4, 0] = 5.0
    i = np.asarray(-np.inf, np.float32)
    r = np.maximum.reduce(x, axis=1, initial=i[()])
    calls = []
    got = reduction._minmax_repair("maximum", False, x, i, r, True, (0, 1), TINY[np.dtype(np.float32)],
                                   lambda: calls.append(1))
    assert not calls
    want = C.fold_minmax_rows("maximum", False, i[()], x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.integers(1, 32), st.sampled_from(["maximum", "minimum"]), st.booleans(),
       st.integers(0, 2**31 - 1), st.sampled_from([-np.inf, np.inf, 0.0, -0.0, 2.0]))
def test_nan_filled_rows_equal_the_rule(o, n, kind, swapped, seed, init):
    """Every row NaN at its edge (all NaN, or NaN first / last with other values after it)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((o, n)) * 4).astype(np.float32)
    nans = np.concatenate([_HOSTILE[:2], _PAYLOAD])
    if rng.random() < 0.5:
        x[:] = nans[rng.integers(0, nans.size, (o, n))]
    else:
        x[:, -1 if swapped else 0] = nans[rng.integers(0, nans.size, o)]
    i = np.asarray(init, np.float32)
    uf = np.maximum if kind == "maximum" else np.minimum
    with np.errstate(all="ignore"):
        r = uf.reduce(x, axis=1, initial=i[()])
        want = C.fold_minmax_rows(kind, swapped, i[()], x)
        got = reduction._minmax_repair(kind, swapped, x, i, r, True, (0, 1), TINY[np.dtype(np.float32)],
                                       lambda: want)
    assert np.array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))
