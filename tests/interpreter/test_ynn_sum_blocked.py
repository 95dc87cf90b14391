"""ynn_sum.column_sums's blocked NumPy path (each level of the kn kernel's accumulator tree added
for all its blocks at once) gives the bits of the kernel's adds made one term at a time, zeros'
signs, infinities, subnormals and overflow included, with and without the processor's FTZ/DAZ
flags; inputs holding NaN keep the one-term-at-a-time loop."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli.interpreter import ynn_sum
from hlo_cli.interpreter.fpenv import hardware


def _one_at_a_time(a):
    """The kn kernel's adds in its order, one four-row part at a time (the path NaN inputs take)."""
    return ynn_sum.column_sums_by_part(a, np.zeros(a.shape[1:], a.dtype))


def _values(seed, shape, dt, kind):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * np.exp(rng.uniform(-30, 30, shape))).astype(dt)
    u = rng.random(shape)
    fi = np.finfo(dt)
    if kind == "inf":
        a[u < 0.02] = np.inf
        a[u > 0.98] = -np.inf
    elif kind == "tiny":
        a[u < 0.1] = fi.tiny / 4
        a[u > 0.9] = -0.0
    elif kind == "huge":
        a = (a / np.abs(a).max() * fi.max).astype(dt)
    return a


@settings(max_examples=80, deadline=None)
@given(st.integers(16, 1300), st.lists(st.integers(1, 6), min_size=1, max_size=2),
       st.sampled_from([np.float32, np.float64]), st.sampled_from(["plain", "inf", "tiny", "huge"]),
       st.booleans(), st.booleans(), st.integers(0, 2**31))
def test_blocked_column_sums_give_the_kernels_bits(k, rest, dt, kind, flags, strided, seed):
    a = _values(seed, (k, *rest), dt, kind)
    if strided:
        a = np.repeat(a, 2, axis=-1)[..., ::2]
    hw = hardware() if flags else None
    with np.errstate(all="ignore"):
        if hw is not None:
            hw[0](hw[1])
        try:
            got, want = ynn_sum.column_sums(a), _one_at_a_time(a)
        finally:
            if hw is not None:
                hw[0](hw[2])
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("k", [16, 300, 1024])
def test_nan_inputs_keep_the_loop(k, monkeypatch):
    a = _values(k, (k, 3), np.float32, "plain")
    a[k // 2, 1] = np.nan
    a[k - 1, 1] = -np.nan
    monkeypatch.setattr(ynn_sum, "_column_sums_blocked", None)     # (would fail if called)
    with np.errstate(all="ignore"):
        got = ynn_sum.column_sums(a)
    assert got.tobytes() == _one_at_a_time(a).tobytes()
