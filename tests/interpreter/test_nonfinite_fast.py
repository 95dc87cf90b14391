"""NaN and inf at full speed: the fast paths that keep computing when a value is NaN or inf (the
elementwise kernels trusting NumPy's NaN bits where the probes in kernels.py and
elementwise.hardware_nan_exact found them the rule's, the max/min reduce on integer bits, the
max/min pooling sweep keeping the winning NaN, select-and-scatter's sweeps with NaN operands and
non-finite sources) give the reference path's bits on random arrays with NaN of both signs and
payloads, +-inf, -0 and subnormals sprinkled in.  The reference paths are the rules alone
(compiled=False), the reduce-window gather, and select-and-scatter's generic select and scatter."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.interpreter import computations as C
from hlo_cli.interpreter import kernels as K
from hlo_cli.interpreter.evaluator import run_module
from hlo_cli.interpreter.ops import elementwise as E
from hlo_cli.interpreter.ops import reduction as R
from hlo_cli.parser import parse

_SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-310, 1.5, -2.5]
_PAYLOADS = {np.float32: np.array([0x7FC01234, 0xFFC00F00, 0x7F800001], np.uint32).view(np.float32),
             np.float64: np.array([0x7FF8000000001234, 0xFFF8000000000F00], np.uint64).view(np.float64)}
_DT = {"f32": np.float32, "f64": np.float64}


def _sprinkled(rng, shape, dt, share):
    x = np.asarray(((rng.random(shape) - 0.5) * 8).astype(dt))
    pool = np.concatenate([np.array(_SPECIAL).astype(dt), _PAYLOADS[dt]])
    hit = np.asarray(rng.random(shape) < share)
    x[hit] = pool[rng.integers(0, pool.size, int(hit.sum()))]
    return x


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _leaves(r):
    return [np.asarray(v) for v in (r if isinstance(r, (tuple, list)) else [r])]


def _same(got, want):
    for g, w in zip(_leaves(got), _leaves(want)):
        assert g.shape == w.shape and np.array_equal(_bits(g), _bits(w))


def _fast_equals_rules(text, args, software=False):
    import hlo_cli.interpreter.fpenv as fpenv
    module = parse(text)
    old = fpenv._state
    try:
        if software:
            fpenv._state = None
        got = run_module(module, args)
        want = run_module(module, args, compiled=False)
    finally:
        fpenv._state = old
    _same(got, want)


# ----------------------------------------------------------------------------- elementwise

_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(_BINARY), st.sampled_from(["f32", "f64"]), st.integers(0, 2**31 - 1),
       st.sampled_from([0.01, 0.2, 1.0]), st.sampled_from(["scalar_right", "scalar_left", "transposed"]),
       st.booleans())
def test_elementwise_layouts_equal_the_rules(op, dt, seed, share, layout, software):
    """Broadcast scalars (NaN or not) on either side and transposed operands: the layouts NumPy
    runs through other loops than the probes' dense ones."""
    rng = np.random.default_rng(seed)
    t, s = f"{dt}[16,40]", f"{dt}[]"
    if layout == "transposed":
        text = (f"HloModule m\nENTRY e {{\n  p0 = {t} parameter(0)\n  p1 = {dt}[40,16] parameter(1)\n"
                f"  t = {t} transpose(p1), dimensions={{1,0}}\n  ROOT r = {t} {op}(t, p0)\n}}\n")
        args = [_sprinkled(rng, (16, 40), _DT[dt], share), _sprinkled(rng, (40, 16), _DT[dt], share)]
    else:
        ops = "b, p0" if layout == "scalar_left" else "p0, b"
        text = (f"HloModule m\nENTRY e {{\n  p0 = {t} parameter(0)\n  p1 = {s} parameter(1)\n"
                f"  b = {t} broadcast(p1), dimensions={{}}\n  ROOT r = {t} {op}({ops})\n}}\n")
        args = [_sprinkled(rng, (16, 40), _DT[dt], share), _sprinkled(rng, (), _DT[dt], 0.7)]
    _fast_equals_rules(text, args, software)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["f32", "f64"]), st.integers(0, 2**31 - 1), st.sampled_from([0.01, 0.3, 1.0]))
def test_elementwise_chain_equals_the_rules(dt, seed, share):
    """The benchmark's chain (a fused region, block by block): add, multiply, maximum, compare,
    select, exponential on sprinkled operands."""
    rng = np.random.default_rng(seed)
    t = f"{dt}[64,300]"
    text = (f"HloModule m\nENTRY e {{\n  p0 = {t} parameter(0)\n  p1 = {t} parameter(1)\n  p2 = {t} parameter(2)\n"
            f"  a = {t} add(p0, p1)\n  m = {t} multiply(a, p2)\n  x = {t} maximum(m, p1)\n"
            f"  g = pred[64,300] compare(x, p2), direction=GT\n  s = {t} select(g, x, p0)\n"
            f"  ROOT r = {t} exponential(s)\n}}\n")
    _fast_equals_rules(text, [_sprinkled(rng, (64, 300), _DT[dt], share) for _ in range(3)])


def test_the_probes_hold_on_this_machine():
    """The NaN-order probes: where they fail (another NumPy build) the kernels keep their checks,
    so this only says which case the other tests exercise here."""
    for dt in (np.float32, np.float64):
        assert K.minmax_keeps_nan(np.maximum, dt) in (True, False)
        assert E.hardware_nan_exact(np.add, dt) in (True, False)
    assert K.lone_value(np.broadcast_to(np.float32(2), (3, 4))) == 2
    assert K.lone_value(np.zeros((3, 4), np.float32)) is None
    assert E.two_nans(np.ones(3), np.full(3, np.nan)) is None
    assert E.two_nans(np.array([np.nan, 1.0]), np.full(2, np.nan)).tolist() == [True, False]


# ----------------------------------------------------------------------------- reduce max/min

@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["maximum", "minimum"]), st.booleans(), st.sampled_from(["f32", "f64"]),
       st.integers(0, 2**31 - 1), st.sampled_from([0.0, 0.02, 0.3, 1.0]),
       st.sampled_from(["-inf", "inf", "0", "-0", "2"]), st.sampled_from([((6, 5, 7), "1,2"), ((9, 40), "1"),
                                                                  ((3, 50, 4), "0,2"), ((4, 6), "0,1")]))
def test_reduce_minmax_equals_the_rule(kind, swapped, dt, seed, share, init, shape_dims):
    shape, dims = shape_dims
    rng = np.random.default_rng(seed)
    keep = [n for d, n in enumerate(shape) if str(d) not in dims.split(",")]
    out = f"{dt}[{','.join(map(str, keep))}]"
    body = "maximum" if kind == "maximum" else "minimum"
    a, b = ("b", "a") if swapped else ("a", "b")
    text = (f"HloModule m\n\nred {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
            f"  ROOT r = {dt}[] {body}({a}, {b})\n}}\n\nENTRY e {{\n"
            f"  p0 = {dt}[{','.join(map(str, shape))}] parameter(0)\n  c = {dt}[] constant({init})\n"
            f"  ROOT r = {out} reduce(p0, c), dimensions={{{dims}}}, to_apply=red\n}}\n")
    _fast_equals_rules(text, [_sprinkled(rng, shape, _DT[dt], share)])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["maximum", "minimum"]), st.sampled_from([np.float32, np.float64]),
       st.integers(0, 2**31 - 1), st.integers(1, 9), st.sampled_from([0.0, 0.1, 0.5, 1.0]))
def test_bit_extreme_is_numpys_extreme(kind, dt, seed, n, share):
    """bit_extreme gives NaN exactly on the rows holding one, else the row's extreme (-0 < +0)."""
    rng = np.random.default_rng(seed)
    x = _sprinkled(rng, (20, n), dt, share)
    got = R.bit_extreme(kind, x, (1,))
    nan_rows = np.isnan(x).any(axis=1)
    assert np.array_equal(np.isnan(got), nan_rows)
    ok = ~nan_rows
    with np.errstate(invalid="ignore"):
        want = (np.maximum if kind == "maximum" else np.minimum).reduce(x[ok], axis=1)
    assert np.array_equal(got[ok], want)            # (-0 == +0: zero results are repaired after)


# ----------------------------------------------------------------------------- pooling

def _window_module(dt, kind, swapped, init):
    a, b = ("b", "a") if swapped else ("a", "b")
    return (f"HloModule m\n\nred {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
            f"  ROOT r = {dt}[] {kind}({a}, {b})\n}}\n\nENTRY e {{\n  p0 = {dt}[2,3,9,10] parameter(0)\n"
            f"  c = {dt}[] constant({init})\n  ROOT r = {dt}[2,3,5,5] reduce-window(p0, c), "
            "window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, to_apply=red\n}\n")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["maximum", "minimum"]), st.booleans(), st.sampled_from(["f32", "f64"]),
       st.integers(0, 2**31 - 1), st.sampled_from([0.02, 0.2, 1.0]), st.sampled_from(["-inf", "inf", "-0"]))
def test_pooling_sweep_equals_the_gather(kind, swapped, dt, seed, share, init):
    rng = np.random.default_rng(seed)
    module = parse(_window_module(dt, kind, swapped, init))
    args = [_sprinkled(rng, (2, 3, 9, 10), _DT[dt], share)]
    got = run_module(module, args)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(C, "_taps_pay", lambda shape, wdims: False)
        want = run_module(module, args)
    finally:
        mp.undo()
    _same(got, want)


# ----------------------------------------------------------------------------- select-and-scatter

def _sas_module(dt, direction, init, swapped):
    a, b = ("b", "a") if swapped else ("a", "b")
    return (f"HloModule m\n\nsel {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n"
            f"  ROOT r = pred[] compare(a, b), direction={direction}\n}}\n\n"
            f"sum {{\n  a = {dt}[] parameter(0)\n  b = {dt}[] parameter(1)\n  ROOT r = {dt}[] add({a}, {b})\n}}\n\n"
            f"ENTRY e {{\n  p0 = {dt}[2,3,9,10] parameter(0)\n  p1 = {dt}[2,3,5,5] parameter(1)\n"
            f"  c = {dt}[] constant({init})\n  ROOT r = {dt}[2,3,9,10] select-and-scatter(p0, p1, c), "
            "window={size=1x1x3x3 stride=1x1x2x2 pad=0_0x0_0x1_1x1_1}, select=sel, scatter=sum\n}\n")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["GE", "GT", "LE", "LT"]), st.sampled_from(["f32", "f64"]), st.integers(0, 2**31 - 1),
       st.sampled_from([0.0, 0.05, 1.0]), st.sampled_from([0.0, 0.05, 0.5]), st.sampled_from(["0", "1.5"]),
       st.booleans())
def test_select_and_scatter_sweeps_equal_the_generic_path(direction, dt, seed, xshare, sshare, init, swapped):
    rng = np.random.default_rng(seed)
    module = parse(_sas_module(dt, direction, init, swapped))
    args = [_sprinkled(rng, (2, 3, 9, 10), _DT[dt], xshare), _sprinkled(rng, (2, 3, 5, 5), _DT[dt], sshare)]
    got = run_module(module, args)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(R, "_running_select", lambda x, how: None)
        mp.setattr(R, "_scatter_add", lambda *a: False)
        want = run_module(module, args, compiled=False)
    finally:
        mp.undo()
    _same(got, want)


_SCATTER_NAN = """HloModule m

ge {
  a = DT[] parameter(0)
  b = DT[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE
}

sc {
  a = DT[] parameter(0)
  b = DT[] parameter(1)
  ROOT r = DT[] OP(A, B)
}

ENTRY e {
  p0 = DT[4] parameter(0)
  p1 = DT[3] parameter(1)
  c = DT[] constant(INIT)
  ROOT r = DT[4] select-and-scatter(p0, p1, c), window={size=2 stride=1}, select=ge, scatter=sc
}
"""


def _scatter_nan_case(dt, op, swapped):
    text = _SCATTER_NAN.replace("DT", dt).replace("OP", op).replace("INIT", "1" if op == "multiply" else "0")
    text = text.replace("(A, B)", "(b, a)" if swapped else "(a, b)")
    npdt = {"f32": np.float32, "f64": np.float64}[dt]
    u = np.uint32 if dt == "f32" else np.uint64
    nans = [0x7FC00001, 0x7FC01234, 0xFFC00000, 0x7F800001] if dt == "f32" else \
        [0x7FF8000000000001, 0x7FF8000000001234, 0xFFF8000000000000, 0x7FF0000000000001]
    x = np.array([1, 5, 1, 7], npdt)                 # windows 0 and 1 pick position 1
    src = np.array([nans[0], nans[1], 0], u).view(npdt)
    return text, [x, src]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("swapped", [False, True])
def test_scatter_nan_order_is_the_source_first(dt, op, swapped):
    """Two NaN sources meeting in one position: the later one's bits (XLA CPU's (source, current)
    order, measured: test_scatter_nan_order_is_xla_s), by the fast sweep and by the rule."""
    text, args = _scatter_nan_case(dt, op, swapped)
    u = np.uint32 if dt == "f32" else np.uint64
    for compiled in (True, False):
        got = np.asarray(run_module(parse(text), args, compiled=compiled))
        assert got.view(u)[1] == args[1].view(u)[1]


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("swapped", [False, True])
def test_scatter_nan_order_is_xla_s(dt, op, swapped):
    pytest.importorskip("jaxlib._hlo")
    from hlo_cli.tools.xla_reference import XlaExecutable
    text, args = _scatter_nan_case(dt, op, swapped)
    want = np.asarray(XlaExecutable(text)(args)[0])
    _same(run_module(parse(text), args), want)
    _same(run_module(parse(text), args, compiled=False), want)


@pytest.mark.slow
def test_nonfinite_pooling_and_its_gradient_are_xla_s():
    """XLA CPU itself on the benchmark's ops at a small size with NaN (quiet, of both signs),
    +-inf and -0 sprinkled in: max pool (reduce-window), its gradient (select-and-scatter), the
    reduce max, the elementwise chain."""
    pytest.importorskip("jaxlib._hlo")
    from hlo_cli.tools.xla_reference import XlaExecutable
    rng = np.random.default_rng(7)
    cases = [(_window_module("f32", "maximum", False, "-inf"), [(2, 3, 9, 10)]),
             (_sas_module("f32", "GE", "0", False), [(2, 3, 9, 10), (2, 3, 5, 5)])]
    for text, shapes in cases:
        args = []
        for shape in shapes:
            x = ((rng.random(shape) - 0.5) * 8).astype(np.float32)
            hit = rng.random(shape) < 0.1
            x[hit] = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0], np.float32)[rng.integers(0, 5, int(hit.sum()))]
            args.append(x)
        want = [np.asarray(v) for v in XlaExecutable(text)(args)]
        _same(run_module(parse(text), args), want)
