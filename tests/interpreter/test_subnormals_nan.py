"""convert.subnormals on arrays holding NaN (whose minimum is NaN): the mask of the subnormal
elements, exactly, through the integer-pattern check instead of the mask passes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter.kernels import subnormals


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([np.float32, np.float64]), st.integers(0, 2**32 - 1), st.integers(1, 300),
       st.booleans())
def test_subnormal_mask_with_nan(dt, seed, n, with_sub):
    rng = np.random.default_rng(seed)
    tiny = np.finfo(dt).tiny
    pool = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, tiny, -tiny, np.finfo(dt).max]
    if with_sub:
        pool += [tiny / 2, -tiny / 3, np.finfo(dt).smallest_subnormal, -np.finfo(dt).smallest_subnormal]
    x = np.array(rng.choice(np.array(pool, dt), n), dt)
    x[rng.integers(n)] = np.nan
    got = subnormals(x)
    want = (np.abs(x) < tiny) & (np.abs(x) > 0)
    if not want.any():
        assert got is None
    else:
        assert got is not None and np.array_equal(got, want)


def test_a_lone_nan_has_no_subnormal():
    for dt in (np.float32, np.float64):
        assert subnormals(np.array(np.nan, dt)) is None
        assert subnormals(np.array([np.nan], dt)) is None
