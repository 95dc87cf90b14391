"""The fast paths of small-array loop bodies (the prepare stages in hlo_cli/interpreter/ops/: reduce, unary
float functions, maximum/minimum, slicing and concatenation, while loops run by the compiler)
against the generic loop, bit for bit, on inputs full of the edge cases they hand back to the
rules (NaN of both signs, infinities, signed zeros, subnormals in and out)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import RunOptions, run_module
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse

_EDGES = [0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 5.9e-39, -5.9e-39, 1.1754944e-38, -1.1754944e-38,
          3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan, -np.nan, 0.5, 3.0, 1e-30, -2.5]


def _bits(value):
    out = []
    for v in (leaves(value) if isinstance(value, tuple) else [value]):
        v = np.asarray(v)
        out.append((v.dtype.str, v.shape, np.ascontiguousarray(v).view(np.uint8).tobytes()))
    return out


def _same(module, args, runs=6):
    """The compiled path (past HOT_CALLS: tier 1 and the generated code) gives the generic loop's bits."""
    slow = _bits(run_module(module, args, RunOptions(), compiled=False))
    for _ in range(runs):
        assert _bits(run_module(module, args, RunOptions())) == slow


def _array(data, shape, dt, mostly_edges=True):
    n = int(np.prod(shape))
    values = st.one_of(st.sampled_from(_EDGES), st.floats(width=32, allow_nan=True)) if mostly_edges \
        else st.floats(-10, 10, width=32)
    v = data.draw(st.lists(values, min_size=n, max_size=n))
    return np.array(v, np.float64).astype(dt).reshape(shape)


_REDUCE = """
HloModule red
add_{t} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
max_{t} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] maximum(b, a)
}}
min_{t} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] minimum(a, b)
}}
ENTRY e {{
  x = {t}[{dims}] parameter(0)
  z = {t}[] constant({init})
  ninf = {t}[] constant(-inf)
  pinf = {t}[] constant(inf)
  s = {t}[{out}] reduce(x, z), dimensions={{{rdims}}}, to_apply=add_{t}
  m = {t}[{out}] reduce(x, ninf), dimensions={{{rdims}}}, to_apply=max_{t}
  n = {t}[{out}] reduce(x, pinf), dimensions={{{rdims}}}, to_apply=min_{t}
  ROOT r = ({t}[{out}], {t}[{out}], {t}[{out}]) tuple(s, m, n)
}}
"""

# (operand dims, reduced dims): short folds, XLA's windows of 32 with and without padding, the
# library-sized sums (at least 4096 elements: the init added once at the end), full reductions
_REDUCE_CASES = [((6,), (0,)), ((4, 16), (0, 1)), ((3, 70), (1,)), ((70, 3), (0,)), ((2, 5, 33), (0, 2)),
                 ((64, 64), (1,)), ((2, 32, 64), (0, 1)), ((100,), (0,))]


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("dims,rdims", _REDUCE_CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("init", ["0", "1.5", "-0"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_reduces_match_the_rules(t, dt, dims, rdims, init, data):
    out = ",".join(str(d) for k, d in enumerate(dims) if k not in rdims)
    module = parse(_REDUCE.format(t=t, dims=",".join(map(str, dims)), out=out, init=init,
                                  rdims=",".join(map(str, rdims))))
    edges = data.draw(st.booleans())
    x = _array(data, dims, dt, mostly_edges=edges) if np.prod(dims) <= 400 else \
        np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal(dims).astype(dt)
    if np.prod(dims) > 400 and edges:
        idx = np.arange(data.draw(st.integers(0, 130)), x.size, 131)
        x.flat[idx] = np.array(_EDGES, dt)[np.arange(idx.size) % len(_EDGES)]
    _same(module, [x], runs=5)


def test_the_fast_paths_are_taken():
    from hlo_cli.interpreter import compiler
    from hlo_cli.interpreter.kernels import RULE
    module = parse(_REDUCE.format(t="f32", dims="3,70", out="3", init="0", rdims="1"))
    steps = compiler.compiled(module, module.entry, True).steps
    assert not [s[4].opcode for s in steps if s[0] == RULE]
    module = parse(_UNARY.format(t="f32", n="7"))
    steps = compiler.compiled(module, module.entry, True).steps
    assert not [s[4].opcode for s in steps if s[0] == RULE]


_UNARY = """
HloModule un
ENTRY e {{
  x = {t}[{n}] parameter(0)
  y = {t}[{n}] parameter(1)
  a = {t}[{n}] exponential(x)
  b = {t}[{n}] tanh(x)
  c = {t}[{n}] sqrt(x)
  d = {t}[{n}] rsqrt(x)
  e = {t}[{n}] maximum(x, y)
  f = {t}[{n}] minimum(x, y)
  g = {t}[{n}] add(b, b)
  ROOT r = ({t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}]) tuple(a, b, c, d, e, f, g)
}}
"""


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("n", ["", "7"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_unary_functions_and_extremes_match_the_rules(t, dt, n, data):
    module = parse(_UNARY.format(t=t, n=n))
    shape = (int(n),) if n else ()
    edges = data.draw(st.booleans())
    _same(module, [_array(data, shape, dt, edges), _array(data, shape, dt, edges)], runs=5)


_CHAIN = """
HloModule chain
ENTRY e {{
  a = {t}[{n}] parameter(0)
  b = {t}[{n}] parameter(1)
  c = {t}[] constant(1.17549435e-38)
  cb = {t}[{n}] broadcast(c), dimensions={{}}
  s = {t}[{n}] add(a, b)
  d = {t}[{n}] subtract(s, cb)
  m = {t}[{n}] multiply(d, a)
  q = {t}[{n}] divide(m, b)
  k = {t}[{n}] multiply(q, cb)
  r = {t}[{n}] add(k, s)
  z = {t}[{n}] reshape(r)
  w = {t}[{n}] subtract(z, a)
  e2 = {t}[{n}] exponential(w)
  f = {t}[{n}] multiply(e2, m)
  ROOT t = ({t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}]) tuple(q, w, f, k)
}}
"""


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
@pytest.mark.parametrize("n", ["", "6"])
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_runs_of_float_steps_under_one_flag_setting_match_the_rules(t, dt, n, data):
    """Generated code runs add..multiply under one setting of FTZ/DAZ and checks the values that
    leave the run for NaN (then runs it again step by step): NaNs made inside (inf - inf, 0 * inf,
    0 / 0) and NaN operands of both signs get the rules' signs."""
    module = parse(_CHAIN.format(t=t, n=n))
    shape = (int(n),) if n else ()
    edges = data.draw(st.booleans())
    _same(module, [_array(data, shape, dt, edges), _array(data, shape, dt, edges)], runs=6)


_LOOP = """
HloModule loop
cond {{
  s = ({it}[], f32[5,3], f32[12,3]) parameter(0)
  i = {it}[] get-tuple-element(s), index=0
  n = {it}[] constant({stop})
  ROOT lt = pred[] compare(i, n), direction=LT, type={ct}
}}
body {{
  s = ({it}[], f32[5,3], f32[12,3]) parameter(0)
  i = {it}[] get-tuple-element(s), index=0
  x = f32[5,3] get-tuple-element(s), index=1
  acc = f32[12,3] get-tuple-element(s), index=2
  z = {it}[] constant(0)
  two = {it}[] constant(2)
  j = {it}[] subtract(i, two)
  d = f32[2,3] dynamic-slice(x, j, z), dynamic_slice_sizes={{2,3}}
  e = f32[2,3] exponential(d)
  sl = f32[1,3] slice(x), slice={{[1:2], [0:3]}}
  c = f32[3,3] concatenate(e, sl), dimensions={{0}}
  u = f32[12,3] dynamic-update-slice(acc, c, i, z)
  r = f32[5,3] dynamic-update-slice(x, sl, j, z)
  one = {it}[] constant(1)
  k = {it}[] add(i, one)
  ROOT t = ({it}[], f32[5,3], f32[12,3]) tuple(k, r, u)
}}
ENTRY main {{
  x = f32[5,3] parameter(0)
  a = f32[12,3] parameter(1)
  start = {it}[] constant({start})
  s0 = ({it}[], f32[5,3], f32[12,3]) tuple(start, x, a)
  w = ({it}[], f32[5,3], f32[12,3]) while(s0), condition=cond, body=body
  ROOT o = f32[12,3] get-tuple-element(w), index=2
}}
"""


@pytest.mark.parametrize("it,ct,start,stop", [("s32", "SIGNED", -3, 15), ("u32", "UNSIGNED", 0, 14),
                                              ("s64", "SIGNED", 4294967290, 4294967305)])
def test_loops_with_clamped_dynamic_slices_match_the_generic_loop(it, ct, start, stop):
    """Start indices below 0 and past the end (unsigned: 0 - 2 wraps to a huge start) are clamped;
    the loop runs past HOT_CALLS iterations, so compiler.run_while calls the generated code."""
    module = parse(_LOOP.format(it=it, ct=ct, start=start, stop=stop))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    a = rng.standard_normal((12, 3)).astype(np.float32)
    _same(module, [x, a], runs=2)


def test_loop_counters_and_the_iteration_limit_hold_past_the_hot_calls():
    from hlo_cli.errors import HloEvalError
    from hlo_cli.interpreter.evaluator import EvalContext
    module = parse(_LOOP.format(it="s32", ct="SIGNED", start=0, stop=40))
    args = [np.zeros((5, 3), np.float32), np.zeros((12, 3), np.float32)]
    ec = EvalContext(module)
    ec.call(module.entry, args)
    assert ec.loop_iterations == 40
    slow = EvalContext(module, compiled_ok=False)
    slow.call(module.entry, args)
    assert slow.loop_iterations == 40 and slow.executed == ec.executed
    for compiled in (True, False):
        with pytest.raises(HloEvalError, match="ran 17 iterations without its condition 'cond'"):
            run_module(module, args, RunOptions(max_iterations=17), compiled=compiled)


def test_an_error_in_a_hot_loop_body_names_its_instruction():
    module = parse("""HloModule err
bad {
  a = f32[2] parameter(0)
  ROOT b = f32[2] custom-call(a), custom_call_target="no_such_target"
}
good {
  ROOT a = f32[2] parameter(0)
}
cond {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(100)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[2] get-tuple-element(s), index=1
  seven = s32[] constant(7)
  at = pred[] compare(i, seven), direction=EQ
  y = f32[2] conditional(at, x, x), true_computation=bad, false_computation=good
  one = s32[] constant(1)
  k = s32[] add(i, one)
  ROOT t = (s32[], f32[2]) tuple(k, y)
}
ENTRY main {
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  s0 = (s32[], f32[2]) tuple(z, x)
  ROOT w = (s32[], f32[2]) while(s0), condition=cond, body=body
}
""", "err.hlo")
    from hlo_cli.errors import HloEvalError
    for compiled in (True, False):
        with pytest.raises(HloEvalError) as exc:
            run_module(module, [np.ones(2, np.float32)], compiled=compiled)
        assert "no_such_target" in str(exc.value)
        assert exc.value.diagnostics[0].instruction == "b", compiled


_DOTS = """
HloModule dots
ENTRY e {
  a = f32[4,6] parameter(0)
  b = f32[6,3] parameter(1)
  s = f32[4,6] add(a, a)
  d = f32[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[6,6] dot(a, s), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  u = f32[3,4] dot(b, a), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  ROOT r = (f32[4,3], f32[6,6], f32[3,4]) tuple(d, t, u)
}
"""


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_small_f32_dots_match_the_rules(data):
    """f32 products computed in f64: subnormal operands read as zeros (by the processor's DAZ
    when hardware_casts says it does that), results flushed and never -0."""
    module = parse(_DOTS)
    edges = data.draw(st.booleans())
    a = _array(data, (4, 6), np.float32, edges)
    b = _array(data, (6, 3), np.float32, edges)
    if data.draw(st.booleans()):            # products whose f32 rounding lands near the smallest normal
        a = (a * np.float32(1e-19)).astype(np.float32)
        b = (b * np.float32(1e-19)).astype(np.float32)
    _same(module, [a, b], runs=5)


_REDUCE_INIT = """
HloModule redinit
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[3,70] parameter(0)
  i = f32[] parameter(1)
  big = f32[64,64] parameter(2)
  s = f32[3] reduce(x, i), dimensions={1}, to_apply=add_f
  m = f32[70] reduce(x, i), dimensions={0}, to_apply=max_f
  l = f32[64] reduce(big, i), dimensions={0}, to_apply=add_f
  ROOT r = (f32[3], f32[70], f32[64]) tuple(s, m, l)
}
"""


@settings(max_examples=40, deadline=None)
@given(data=st.data(), init=st.sampled_from(_EDGES))
def test_reduces_with_an_init_known_only_at_run_time_match_the_rules(data, init):
    """The init of an optimized module's fused reduce is a parameter: -0, subnormal and NaN
    inits go to the rule; library-sized sums (64x64) add it once at the end."""
    module = parse(_REDUCE_INIT)
    x = _array(data, (3, 70), np.float32, data.draw(st.booleans()))
    big = np.random.default_rng(data.draw(st.integers(0, 9))).standard_normal((64, 64)).astype(np.float32)
    _same(module, [x, np.array(init, np.float32), big], runs=5)


def test_bitcasts_and_integer_converts_match_the_rules():
    module = parse("""HloModule casts
ENTRY e {
  a = f32[2,3]{0,1} parameter(0)
  b = f32[3,2]{1,0} bitcast(a)
  c = f32[6]{0} bitcast(a)
  d = f32[3,2]{0,1} bitcast(b)
  k = s32[2,3] parameter(1)
  u = u8[2,3] convert(k)
  w = s64[2,3] convert(u)
  p = pred[2,3] convert(k)
  q = s32[2,3] convert(p)
  v = u32[2,3] convert(k)
  ROOT r = (f32[3,2], f32[6], f32[3,2], u8[2,3], s64[2,3], pred[2,3], s32[2,3], u32[2,3]) tuple(b, c, d, u, w, p, q, v)
}
""")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    k = np.array([[-1, 0, 255], [256, -129, 2**31 - 1]], np.int32)
    _same(module, [a, k])


_WINDOWS = """
HloModule windows
add_f {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
ENTRY e {{
  x = {t}[6,64] parameter(0)
  i = {t}[] parameter(1)
  a = {t}[2,2] reduce-window(x, i), window={{size=3x32 stride=3x32}}, to_apply=add_f
  b = {t}[3,32] reduce-window(x, i), window={{size=2x2 stride=2x2}}, to_apply=add_f
  c = {t}[1,1] reduce-window(x, i), window={{size=6x64 stride=6x64}}, to_apply=add_f
  ROOT r = ({t}[2,2], {t}[3,32], {t}[1,1]) tuple(a, b, c)
}}
"""


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
@settings(max_examples=25, deadline=None)
@given(data=st.data(), init=st.sampled_from(_EDGES))
def test_tiled_reduce_windows_match_the_rules(t, dt, data, init):
    """Windows that tile the operand (XLA's tree rewrite of long sums): sequential sums from the
    init, partial sums flushed; NaN of both signs, infinities, subnormal inits and elements."""
    module = parse(_WINDOWS.format(t=t))
    x = _array(data, (6, 64), dt, data.draw(st.booleans())) if data.draw(st.booleans()) else \
        np.random.default_rng(data.draw(st.integers(0, 9))).standard_normal((6, 64)).astype(dt) * dt(1e-37)
    _same(module, [x, np.array(init, dt)], runs=5)


def test_reduces_over_dimensions_of_size_one_ignore_the_init_like_the_rule():
    module = parse("""HloModule ones
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[1,1,5] parameter(0)
  i = f32[] constant(7)
  s = f32[5] reduce(x, i), dimensions={0,1}, to_apply=add_f
  ROOT r = f32[1,5] reduce(x, i), dimensions={0}, to_apply=add_f
}
""")
    x = np.array([[[1e-40, -0.0, np.nan, 2.0, -np.inf]]], np.float32)
    _same(module, [x])
