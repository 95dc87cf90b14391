"""The compiled elementwise fast paths keep their result when a few elements are NaN (or, for the
f64-core unary ops, zero or subnormal) and give those positions the rule's bits (NaN signs, FTZ)
instead of recomputing the whole array by the rule: the compiled run and the instruction loop
(the rules alone) agree bit for bit on arrays with a few hostile values and on NaN-filled ones,
with and without the processor's FTZ/DAZ flags."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter.evaluator import run_module
from hlo_cli.parser import parse

_HOSTILE = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-310, 700.0, -800.0,
                     1e38, -1e38] + [np.array(0xFFC01234, np.uint32).view(np.float32).item()])
_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
_UNARY = ["exponential", "rsqrt", "tanh", "sqrt", "log"]


def _module(op, dt, n):
    t = f"{dt}[{n}]"
    if op in _UNARY:
        return f"HloModule m\nENTRY e {{\n  p0 = {t} parameter(0)\n  ROOT r = {t} {op}(p0)\n}}\n"
    return (f"HloModule m\nENTRY e {{\n  p0 = {t} parameter(0)\n  p1 = {t} parameter(1)\n"
            f"  ROOT r = {t} {op}(p0, p1)\n}}\n")


def _operand(rng, dt, n, share):
    a = ((rng.random(n) - 0.5) * 8).astype(dt)
    hit = rng.random(n) < share
    a[hit] = _HOSTILE[rng.integers(0, _HOSTILE.size, int(hit.sum()))].astype(dt)
    return a


def _bits(a):
    a = np.asarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(_BINARY + _UNARY), st.sampled_from(["f32", "f64"]), st.integers(0, 2**31 - 1),
       st.sampled_from([0.005, 0.05, 1.0]), st.booleans())
def test_compiled_equals_the_rules(op, dt, seed, share, software):
    import hlo_cli.interpreter.fpenv as fpenv
    n = 4096
    rng = np.random.default_rng(seed)
    module = parse(_module(op, dt, n))
    npdt = np.float32 if dt == "f32" else np.float64
    args = [_operand(rng, npdt, n, share) for _ in module.entry_computation.parameters]
    old = fpenv._state
    try:
        if software:
            fpenv._state = None                         # no processor flags: software flushing
        got = run_module(module, args)
        want = run_module(module, args, compiled=False)
    finally:
        fpenv._state = old
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = want[0] if isinstance(want, (tuple, list)) else want
    assert np.array_equal(_bits(got), _bits(want)), op
