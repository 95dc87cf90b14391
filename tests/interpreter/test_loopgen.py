"""While loops of small arrays as one generated function (hlo_cli/interpreter/loopgen.py) against
the body's generated code (HLO_LOOPGEN=0) and the generic loop (the rules): the same bits on the
JAX and TensorFlow loop samples, and on hypothesis-generated recurrent cells whose inputs are full
of what the generated loop must hand back (NaN of both signs, infinities, zeros of both signs,
subnormals, exp and tanh results that round to zero), with the loop really taken."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import RunOptions, loopgen, run_module
from hlo_cli.interpreter.inputs import bind
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse

from .test_loop_fastpaths import _LOOP

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = [ROOT / "samples" / p for p in (
    "jax/fori_loop.hlo", "jax/fori_loop.opt.hlo", "jax/scan_loop.hlo", "jax/scan_loop.opt.hlo",
    "loops/scan_fixed_weight.hlo", "loops/scan_fixed_weight.opt.hlo", "loops/nested_invariant.hlo",
    "loops/nested_invariant.opt.hlo", "tensorflow/lstm_train_step.hlo", "tensorflow/lstm_train_step.opt.hlo")]


def _bits(values):
    return [(np.asarray(v).dtype.str, np.asarray(v).shape, np.ascontiguousarray(v).tobytes()) for v in values]


def _leaves(value):
    return list(leaves(value)) if isinstance(value, tuple) else [value]


@pytest.fixture
def taken(monkeypatch):
    """The (iterations run, finished) of every generated loop run."""
    runs = []
    real = loopgen.FastLoop.run

    def run(self, ec, state, n, limit, name):
        runs.append(None)                           # (entered)
        out = real(self, ec, state, n, limit, name)
        runs[-1] = (out[1] - n, out[4])
        return out
    monkeypatch.setattr(loopgen.FastLoop, "run", run)
    monkeypatch.setenv("HLO_LOOPGEN", "strict")
    monkeypatch.setattr(loopgen, "LOOPGEN_AFTER", 6)
    return runs


def _three(text, args, monkeypatch, path="loop.hlo", **opts):
    """Bits with the generated loop, without it, and through the generic loop."""
    monkeypatch.setattr(loopgen, "LOOPGEN_AFTER", 6)      # (the loops here are short)
    out = []
    for mode, compiled in (("strict", True), ("0", True), ("strict", False)):
        monkeypatch.setenv("HLO_LOOPGEN", mode)
        module = parse(text, path)                     # a fresh module: nothing cached
        a = bind(module.entry_computation.parameters, [_typed(v, p.shape) for v, p in
                                                        zip(args, module.entry_computation.parameters)])
        out.append(_bits(_leaves(run_module(module, a, RunOptions(**opts), compiled=compiled))))
    monkeypatch.setenv("HLO_LOOPGEN", "strict")
    return out


def _typed(v, shape):
    """Narrow floats are stored as their bits (uint16, uint8)."""
    from hlo_cli.interpreter.values import np_dtype
    want = np_dtype(shape)
    return v.view(want) if v.dtype != want and v.dtype.kind == "u" and v.dtype.itemsize == want.itemsize else v


def _inputs(path):
    base = path.parent / (path.name.split(".")[0] + ".inputs.npz")
    with np.load(base) as z:
        return [z[f"arg{k}"] for k in range(len(z.files))]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_loop_samples_give_the_same_bits(path, taken, monkeypatch):
    fast, plain, generic = _three(path.read_text(), _inputs(path), monkeypatch, str(path))
    assert fast == plain == generic


def test_the_scan_samples_take_the_generated_loop(taken, monkeypatch):
    for name in ("jax/scan_loop.hlo", "jax/scan_loop.opt.hlo", "loops/scan_fixed_weight.hlo"):
        path = ROOT / "samples" / name
        taken.clear()
        _three(path.read_text(), _inputs(path), monkeypatch, str(path))
        assert taken and all(r is not None and r[1] for r in taken), (name, taken)


# ----------------------------------------------------------------------------- recurrent cells

_CELL = """HloModule cell

add_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

max_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}

body {{
  p = (s32[], f32[4,8], f32[], f32[{T},4], f32[{T},4,8], f32[16,8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[4,8] get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  ys = f32[{T},4] get-tuple-element(p), index=3
  xs = f32[{T},4,8] get-tuple-element(p), index=4
  w = f32[16,8] get-tuple-element(p), index=5
  b = f32[8] get-tuple-element(p), index=6
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  zero = s32[] constant(0)
  xd = f32[1,4,8] dynamic-slice(xs, i, zero, zero), dynamic_slice_sizes={{1,4,8}}
  x = f32[4,8] reshape(xd)
  cat = f32[4,16] concatenate(x, h), dimensions={{1}}
  d = f32[4,8] dot(cat, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b2 = f32[1,8] reshape(b)
  b3 = f32[8] reshape(b2)
  bb = f32[4,8] broadcast(b3), dimensions={{1}}
  c1 = f32[] constant(1)
  ones = f32[4,8] broadcast(c1), dimensions={{}}
  v0 = f32[4,8] add(d, bb)
{ops}
  sq = f32[4,8] multiply(hn, hn)
  c0 = f32[] constant(0)
  s = f32[] reduce(sq, c0), dimensions={{0,1}}, to_apply=add_f32
  acc1 = f32[] add(acc, s)
  ninf = f32[] constant(-inf)
  m = f32[4] reduce(hn, ninf), dimensions={{1}}, to_apply=max_f32
  m2 = f32[1,4] reshape(m)
  ys1 = f32[{T},4] dynamic-update-slice(ys, m2, i, zero)
  ROOT t = (s32[], f32[4,8], f32[], f32[{T},4], f32[{T},4,8], f32[16,8], f32[8]) tuple(i1, hn, acc1, ys1, xs, w, b)
}}

cond {{
  p = (s32[], f32[4,8], f32[], f32[{T},4], f32[{T},4,8], f32[16,8], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({T})
  ROOT lt = pred[] compare(i, n), direction=LT
}}

ENTRY e {{
  h0 = f32[4,8] parameter(0)
  xs = f32[{T},4,8] parameter(1)
  w = f32[16,8] parameter(2)
  b = f32[8] parameter(3)
  ys0 = f32[{T},4] parameter(4)
  i0 = s32[] constant(0)
  a0 = f32[] constant(0)
  s0 = (s32[], f32[4,8], f32[], f32[{T},4], f32[{T},4,8], f32[16,8], f32[8]) tuple(i0, h0, a0, ys0, xs, w, b)
  wl = (s32[], f32[4,8], f32[], f32[{T},4], f32[{T},4,8], f32[16,8], f32[8]) while(s0), condition=cond, body=body
  o1 = f32[4,8] get-tuple-element(wl), index=1
  o2 = f32[] get-tuple-element(wl), index=2
  o3 = f32[{T},4] get-tuple-element(wl), index=3
  ROOT r = (f32[4,8], f32[], f32[{T},4]) tuple(o1, o2, o3)
}}
"""

# one step of the cell: (template, reads another value); {a} the previous value, {o} the other
_STEPS = [
    ("exponential({a})", False), ("tanh({a})", False), ("negate({a})", False),
    ("add({a}, {o})", True), ("subtract({a}, {o})", True), ("multiply({a}, {o})", True),
    ("divide({a}, {o})", True), ("divide(ones, {a})", False), ("logistic({a})", False),
    ("maximum({a}, {o})", True), ("rsqrt({a})", False), ("sqrt({a})", False),
]
_OTHERS = ["h", "x", "bb", "ones", "v0"]


def _cell(steps, T):
    lines = []
    prev = "v0"
    for n, (k, o) in enumerate(steps):
        tmpl, _ = _STEPS[k]
        lines.append(f"  v{n + 1} = f32[4,8] " + tmpl.format(a=prev, o=_OTHERS[o]))
        prev = f"v{n + 1}"
    lines.append(f"  hn = f32[4,8] add({prev}, ones)" if not steps else f"  hn = f32[4,8] copy({prev})")
    return _CELL.format(T=T, ops="\n".join(lines))


_EDGES = np.array([0.0, -0.0, 1e-45, -1e-45, 5.9e-39, -5.9e-39, 1.1754944e-38, 3.4028235e38, -3.4028235e38,
                   np.inf, -np.inf, np.nan, -np.nan, 88.7, -104.0, 1e-20, -87.3], np.float32)


def _array(data, shape, rng, edges):
    a = rng.standard_normal(shape).astype(np.float32)
    n = data.draw(st.integers(0, edges), label="edges")
    flat = a.reshape(-1)
    for _ in range(n):
        at = data.draw(st.integers(0, flat.size - 1))
        flat[at] = data.draw(st.sampled_from(list(_EDGES)))
    return a


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_recurrent_cells_give_the_rules_bits(data, monkeypatch):      # (_three sets the variable it reads)
    T = 12
    steps = data.draw(st.lists(st.tuples(st.integers(0, len(_STEPS) - 1), st.integers(0, len(_OTHERS) - 1)),
                               min_size=0, max_size=6), label="steps")
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    args = [_array(data, (4, 8), rng, 3), _array(data, (T, 4, 8), rng, 6),
            _array(data, (16, 8), rng, 2) * np.float32(0.3), _array(data, (8,), rng, 1),
            np.zeros((T, 4), np.float32)]
    text = _cell(steps, T)
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic


def test_a_cell_takes_the_generated_loop_and_leaves_its_inputs_alone(taken, monkeypatch):
    T = 40
    text = _cell([(1, 0), (3, 1), (0, 0), (7, 0)], T)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((T, 4, 8)).astype(np.float32),
            rng.standard_normal((16, 8)).astype(np.float32) * np.float32(0.3),
            rng.standard_normal(8).astype(np.float32), np.full((T, 4), 7, np.float32)]
    keep = [a.copy() for a in args]
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1] and taken[0][0] == T - loopgen.LOOPGEN_AFTER   # handed over, to the end
    for a, k in zip(args, keep):                    # the buffer written in place is the loop's own
        assert a.tobytes() == k.tobytes()


def test_nan_in_the_middle_runs_those_iterations_again_and_goes_on(taken, monkeypatch):
    T = 30
    text = _cell([(3, 1), (1, 0)], T)
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((T, 4, 8)).astype(np.float32)
    xs[9, 1, 3] = np.inf                            # inf + (-inf) -> NaN of the processor's sign
    xs[9, 2, 3] = -np.inf
    xs[17, 0, 0] = np.float32(-np.nan)
    w = np.zeros((16, 8), np.float32)
    w[:8] = np.eye(8, dtype=np.float32)
    args = [np.zeros((4, 8), np.float32), xs, w, np.zeros(8, np.float32), np.zeros((T, 4), np.float32)]
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic
    assert taken


def test_many_iterations_run_again_give_the_loop_back(taken, monkeypatch):
    T = 60
    text = _cell([(1, 0)], T)                       # NaN in every iteration: each one runs again
    args = [np.zeros((4, 8), np.float32), np.full((T, 4, 8), np.nan, np.float32),
            np.ones((16, 8), np.float32), np.zeros(8, np.float32), np.zeros((T, 4), np.float32)]
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic
    assert taken and not taken[0][1] and taken[0][0] == loopgen.GIVE_UP   # then the loop as before


def test_the_iteration_limit_holds_in_the_generated_loop(taken, monkeypatch):
    T = 40
    text = _cell([(1, 0)], T)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (T, 4, 8), (16, 8), (8,))] + \
        [np.zeros((T, 4), np.float32)]
    module = parse(text)
    a = bind(module.entry_computation.parameters, args)
    with pytest.raises(HloEvalError, match="ran 23 iterations without its condition 'cond'"):
        run_module(module, a, RunOptions(max_iterations=23))
    assert taken


@pytest.mark.parametrize("name", ["exp", "tanh", "rsqrt", "negative"])
def test_the_flag_probes_hold_on_many_more_values(name):
    """What loopgen.flags_neutral probes on a sample, on a million f32 values (all magnitudes)."""
    from hlo_cli.interpreter.fpenv import hardware
    from hlo_cli.interpreter.kernels import TINY
    hw = hardware()
    if hw is None:
        pytest.skip("the processor's flags are not used here")
    assert loopgen.flags_neutral(name)
    if name == "negative":
        return
    fset, on, off = hw
    rng = np.random.default_rng(7)
    fn = {"exp": np.exp, "tanh": np.tanh, "rsqrt": lambda v: 1 / np.sqrt(v)}[name]
    with np.errstate(all="ignore"):
        x = np.concatenate([rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32),
                            np.linspace(-105, 90, 1 << 19, dtype=np.float32)]).astype(np.float64)
        want = fn(x).astype(np.float32)
        fset(on)
        try:
            got = fn(x).astype(np.float32)
        finally:
            fset(off)
    keep = np.abs(want) >= TINY[np.dtype(np.float32)]
    assert got[keep].tobytes() == want[keep].tobytes()


_CLAMPED = _LOOP      # the clamped dynamic-slice loop of test_loop_fastpaths


@pytest.mark.parametrize("it,ct,start,stop", [("s32", "SIGNED", -3, 15), ("u32", "UNSIGNED", 0, 14),
                                              ("s64", "SIGNED", 4294967290, 4294967305)])
def test_clamped_slices_and_updates_in_place_give_the_same_bits(it, ct, start, stop, taken, monkeypatch):
    """Start indices below 0 and past the end (unsigned: 0 - 2 wraps to a huge start) are clamped
    as the fast paths clamp them; the update of the accumulator is written in place, the other one
    (its buffer is also read) is not."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((12, 3)).astype(np.float32)]
    fast, plain, generic = _three(_CLAMPED.format(it=it, ct=ct, start=start, stop=stop), args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1]


def test_a_body_drawing_random_numbers_is_left_to_the_body_code(taken, monkeypatch):
    """An iteration may run twice in the generated loop: a body with rng (or io, collectives,
    custom calls) is not generated."""
    text = _cell([(1, 0)], 20).replace(
        "  v0 = f32[4,8] add(d, bb)",
        "  lo = f32[] constant(0)\n  hi = f32[] constant(1)\n"
        "  rn = f32[4,8] rng(lo, hi), distribution=rng_uniform\n  v0 = f32[4,8] add(d, rn)")
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (20, 4, 8), (16, 8), (8,))] + \
        [np.zeros((20, 4), np.float32)]
    module = parse(text)
    a = bind(module.entry_computation.parameters, args)
    first = _bits(_leaves(run_module(module, a, RunOptions(seed=3))))
    again = _bits(_leaves(run_module(parse(text), a, RunOptions(seed=3))))
    assert first == again and not taken


def test_products_of_operands_in_any_memory_order_give_the_same_bits(taken, monkeypatch):
    """np.dot stands for matmul's product only on C-contiguous operands: a weight in Fortran order
    and a transposed operand take matmul's own route."""
    T = 20
    text = _cell([(1, 0)], T).replace(
        "  v0 = f32[4,8] add(d, bb)",
        "  ht = f32[8,4] transpose(h), dimensions={1,0}\n"
        "  w8 = f32[8,8] slice(w), slice={[8:16], [0:8]}\n"
        "  e = f32[4,8] dot(ht, w8), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n"
        "  v0 = f32[4,8] add(d, e)")
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((T, 4, 8)).astype(np.float32),
            np.asfortranarray(rng.standard_normal((16, 8)).astype(np.float32) * np.float32(0.3)),
            rng.standard_normal(8).astype(np.float32), np.zeros((T, 4), np.float32)]
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1]


_SLICED = """HloModule sliced
cond {
  p = (s32[], f32[4,8], f32[20,4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(20)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[4,8], f32[20,4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[4,8] get-tuple-element(p), index=1
  xs = f32[20,4,8] get-tuple-element(p), index=2
  z = s32[] constant(0)
  xd = f32[1,4,8] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,4,8}
  x = f32[4,8] reshape(xd)
  h1 = f32[4,8] add(h, x)
  h2 = f32[4,8] subtract(h1, h1)
  h3 = f32[4,8] add(h2, x)
  c = f32[8,8] concatenate(h3, h3), dimensions={0}
  d = f32[4,8] dynamic-slice(c, i, z), dynamic_slice_sizes={4,8}
  one = s32[] constant(1)
  k = s32[] add(i, one)
  ROOT t = (s32[], f32[4,8], f32[20,4,8]) tuple(k, d, xs)
}
ENTRY e {
  h0 = f32[4,8] parameter(0)
  xs = f32[20,4,8] parameter(1)
  z = s32[] constant(0)
  s0 = (s32[], f32[4,8], f32[20,4,8]) tuple(z, h0, xs)
  w = (s32[], f32[4,8], f32[20,4,8]) while(s0), condition=cond, body=body
  ROOT o = f32[4,8] get-tuple-element(w), index=1
}
"""


def test_a_slice_leaving_the_iteration_is_checked_for_nan(taken, monkeypatch):
    """A dynamic slice of bare arithmetic becoming the next state: its NaNs (inf - inf, made in the
    generated loop) are the rules' too."""
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((20, 4, 8)).astype(np.float32)
    xs[12, 1, 2] = np.inf
    xs[15, 3, 0] = -np.inf
    fast, plain, generic = _three(_SLICED, [np.zeros((4, 8), np.float32), xs], monkeypatch)
    assert fast == plain == generic
    assert taken                                    # (NaN from iteration 12 on: it gives the loop back)


def test_loop_invariant_products_and_sums_run_once_before_the_loop(taken, monkeypatch):
    """A product and a sum of values the loop does not change (weights) run before the first
    iteration, with the same bits."""
    T = 20
    text = _cell([(1, 0)], T).replace(
        "  v0 = f32[4,8] add(d, bb)",
        "  w1 = f32[8,8] slice(w), slice={[0:8], [0:8]}\n"
        "  w2 = f32[8,8] slice(w), slice={[8:16], [0:8]}\n"
        "  ww = f32[8,8] dot(w1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  zz = f32[] constant(0)\n"
        "  sw = f32[8] reduce(ww, zz), dimensions={0}, to_apply=add_f32\n"
        "  sb = f32[4,8] broadcast(sw), dimensions={1}\n"
        "  hw = f32[4,8] dot(h, ww), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  v0a = f32[4,8] add(d, hw)\n"
        "  v0 = f32[4,8] add(v0a, sb)")
    rng = np.random.default_rng(8)
    args = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((T, 4, 8)).astype(np.float32),
            rng.standard_normal((16, 8)).astype(np.float32) * np.float32(0.3),
            rng.standard_normal(8).astype(np.float32), np.zeros((T, 4), np.float32)]
    fast, plain, generic = _three(text, args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1]
