"""Runs of f32/f64 arithmetic in compiled code (compiler._float_runs) with NaN operands: the steps
run as bare ufuncs under the processor's flags, and a NaN leaving the run sends it back to the
kernels only from the first step where two NaNs met (the steps being nan_exact, a probed fact:
kernels.Capabilities) -- never at all for a run of subtracts and divides, whose NumPy bits are the
rule's everywhere.  Laws: the step loop's groups and the generated code give the generic
evaluator's bits on arrays holding NaNs of both signs and several payloads, +-inf, -0.0."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import RunOptions, run_module
from hlo_cli.interpreter import compiler, loopgen
from hlo_cli.interpreter.fpenv import hardware
from hlo_cli.interpreter.kernels import capabilities
from hlo_cli.interpreter.per_module import module_cache
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse

from .test_loopgen import _three, taken  # noqa: F401 -- (a fixture)

_CHAIN = """
HloModule nanchain
ENTRY e {{
  a = {t}[36] parameter(0)
  b = {t}[36] parameter(1)
  m = {t}[36] multiply(a, b)
  s = {t}[36] add(m, a)
  d = {t}[36] subtract(s, m)
  q = {t}[36] divide(d, b)
  qr = {t}[6,6] reshape(q)
  br = {t}[6,6] reshape(b)
  p = {t}[6,6] multiply(qr, br)
  pr = {t}[36] reshape(p)
  e = {t}[36] add(pr, pr)
  x = {t}[36] exponential(e)
  u = {t}[36] subtract(x, a)
  v = {t}[36] divide(u, b)
  w = {t}[36] subtract(v, v)
  ROOT r = ({t}[36], {t}[36], {t}[36], {t}[36]) tuple(e, d, m, w)
}}
"""

_DT = {"f32": np.float32, "f64": np.float64}
_NANS = {np.float32: np.array([0x7FC00000, 0xFFC00000, 0x7FC01234, 0xFFD54321, 0x7F800001, 0xFF812345],
                              np.uint32).view(np.float32),
         np.float64: np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000001234,
                               0xFFFC000087654321, 0x7FF0000000000001], np.uint64).view(np.float64)}


def _values(dt):
    special = [float(v) for v in (np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3e-39, 1e38)]
    pool = st.one_of(st.sampled_from(range(len(_NANS[dt]))).map(lambda k: _NANS[dt][k]),
                     st.sampled_from(special), st.floats(-1e6, 1e6, width=32).map(float))
    return st.lists(pool, min_size=36, max_size=36).map(lambda v: np.array(v, dt))


def _bits(result):
    out = []
    for v in leaves(result) if isinstance(result, tuple) else [result]:
        v = np.asarray(v)
        out.append(v.view({4: np.uint32, 8: np.uint64}[v.dtype.itemsize]).tolist())
    return out


@pytest.mark.parametrize("t", ["f32", "f64"])
@settings(max_examples=40, deadline=None)
@given(data=st.data(), share=st.sampled_from([0, 2, 3]))
def test_compiled_runs_give_the_rules_nan_bits(t, data, share):
    dt = _DT[t]
    a = data.draw(_values(dt))
    b = data.draw(_values(dt))
    if share:                                   # NaNs meeting NaNs: the same values on both sides
        b[::share] = a[::share]
    module = parse(_CHAIN.format(t=t))
    want = _bits(run_module(module, [a, b], RunOptions(), compiled=False))
    for _ in range(compiler.HOT_CALLS + 2):     # the step loop's groups, then the generated code
        assert _bits(run_module(module, [a, b], RunOptions())) == want


def test_float_runs_check_only_where_nans_may_meet():
    """The chain's runs: the first (multiplies and adds) NaN-checked, re-run from a meeting step;
    the last (subtracts and divides, exact wherever NaNs meet) not checked at all."""
    if hardware() is None:
        pytest.skip("no hardware FTZ/DAZ here")
    module = parse(_CHAIN.format(t="f32"))
    a = np.ones(36, np.float32)
    run_module(module, [a, a], RunOptions())
    entry = next(c for c in module_cache(module).values()
                 if isinstance(c, compiler.Compiled) and c.comp.is_entry)
    runs = sorted(compiler._float_runs(entry.steps, entry.root).items())
    assert len(runs) == 2
    (first, (_, checks, meets)), (_, (_, last_checks, last_meets)) = runs
    ufuncs = [capabilities(entry.steps[first + q].payload).hw_ufunc for q, _a, _b in meets]
    assert checks and ufuncs == [np.multiply, np.add, np.multiply, np.add]
    assert last_checks == [] and last_meets == ()


_SUBDIV_LOOP = """
HloModule subdiv
body {
  p = (s32[], f32[64], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  y = f32[64] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  d = f32[64] subtract(x, y)
  q = f32[64] divide(d, y)
  r = f32[64] subtract(q, x)
  ROOT t = (s32[], f32[64], f32[64]) tuple(j, r, y)
}
cond {
  p = (s32[], f32[64], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(40)
  ROOT l = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[64], f32[64]) tuple(z, x, y)
  ROOT w = (s32[], f32[64], f32[64]) while(t), condition=cond, body=body
}
"""


def test_a_loop_of_subtracts_and_divides_keeps_going_through_nans(taken, monkeypatch):
    """The generated loop (loopgen) needs no NaN check for subtract and divide: NaNs of every
    payload and sign in the state run every iteration in the loop, with the rules' bits."""
    if hardware() is None:
        pytest.skip("no hardware FTZ/DAZ here")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(64).astype(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    x[::5] = np.resize(_NANS[np.float32], x[::5].size)
    y[::7] = np.resize(_NANS[np.float32][::-1], y[::7].size)
    y[3], y[4], x[6] = np.inf, -0.0, -np.inf
    fast, plain, generic = _three(_SUBDIV_LOOP, [x, y], monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1] and taken[0][0] == 40 - loopgen.LOOPGEN_AFTER   # no iteration given back
