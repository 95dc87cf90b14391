"""While loops compiled to native code with numba (hlo_cli/interpreter/native.py) against the rules
(the generic evaluator) and today's path (HLO_NATIVE=0): the same bits on the loop samples and on
recurrent cells whose values are full of what the native loop must hand back or get right (NaN of
both signs, infinities, zeros of both signs, subnormals, exp and tanh results that round to zero or
sit near a rounding edge), with the native loop really taken.  Compiling a loop takes seconds, so
the programs are few and the values many (one compilation serves every example of a program)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

numba = pytest.importorskip("numba")

from hlo_cli.errors import HloEvalError  # noqa: E402
from hlo_cli.interpreter import RunOptions, loopgen, native, run_module  # noqa: E402
from hlo_cli.interpreter.inputs import bind  # noqa: E402
from hlo_cli.interpreter.values import leaves  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

from .test_loop_fastpaths import _LOOP  # noqa: E402
from .test_loopgen import _CELL, _EDGES, _OTHERS, _STEPS, ROOT, SAMPLES, _cell, _inputs  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One numba cache for the session (a program compiled once serves every test using it)."""
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-cache"))
    monkeypatch.setattr(loopgen, "LOOPGEN_AFTER", 6)        # (the loops here are short)


@pytest.fixture
def taken(monkeypatch):
    """(iterations run natively or redone, finished) of every native loop run."""
    runs = []
    real = native.NativeLoop.run

    def run(self, ec, state, n, limit, name):
        runs.append(None)
        out = real(self, ec, state, n, limit, name)
        runs[-1] = (out[1] - n, out[4])
        return out
    monkeypatch.setattr(native.NativeLoop, "run", run)
    return runs


def _bits(value):
    vals = list(leaves(value)) if isinstance(value, tuple) else [value]
    return [(np.asarray(v).dtype.str, np.asarray(v).shape, np.ascontiguousarray(v).tobytes()) for v in vals]


def _run(text, args, monkeypatch, mode, compiled=True, **opts):
    monkeypatch.setenv("HLO_NATIVE", mode)
    module = parse(text, "loop.hlo")                         # a fresh module: nothing cached
    a = bind(module.entry_computation.parameters, args)
    return _bits(run_module(module, a, RunOptions(**opts), compiled=compiled))


def _three(text, args, monkeypatch, **opts):
    """Bits with the native loop, with today's path, and through the generic loop (the rules)."""
    return (_run(text, args, monkeypatch, "strict", **opts), _run(text, args, monkeypatch, "0", **opts),
            _run(text, args, monkeypatch, "0", compiled=False, **opts))


# ----------------------------------------------------------------------------- the samples

@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_loop_samples_give_the_same_bits(path, taken, monkeypatch):
    fast, plain, generic = _three(path.read_text(), _inputs(path), monkeypatch)
    assert fast == plain == generic


@pytest.mark.slow
@pytest.mark.parametrize("name", ["jax/scan_loop.hlo", "jax/scan_loop.opt.hlo"])
def test_the_scan_samples_run_natively_to_the_end(name, taken, monkeypatch):
    path = ROOT / "samples" / name
    fast, plain, generic = _three(path.read_text(), _inputs(path), monkeypatch)
    assert fast == plain == generic
    assert taken and all(r is not None and r[1] for r in taken), taken


# ----------------------------------------------------------------------------- recurrent cells

# every opcode of the cell template's body the native loop takes, in one program
_ALL_STEPS = """
  v1 = f32[4,8] exponential(v0)
  v2 = f32[4,8] tanh(v1)
  v3 = f32[4,8] subtract(v2, x)
  v4 = f32[4,8] divide(ones, v3)
  v5 = f32[4,8] multiply(v4, h)
  v6 = f32[4,8] maximum(v5, x)
  v7 = f32[4,8] negate(v6)
  v8 = f32[4,8] minimum(v7, h)
  v9 = f32[4,8] tanh(x)
  gt = pred[4,8] compare(v8, v9), direction=GT
  v10 = f32[4,8] select(gt, v8, v9)
  v11 = f64[4,8] convert(v10)
  v12 = f32[4,8] convert(v11)
  tr = f32[8,4] transpose(v12), dimensions={1,0}
  sl = f32[4,4] slice(tr), slice={[2:6], [0:4]}
  ab = f32[4,4] abs(sl)
  sb = f32[4,8] concatenate(ab, sl), dimensions={1}
  hn = f32[4,8] add(v12, sb)"""


# one length for every cell: one program, compiled once for all the tests using it
_T = 40


def _cell_text(T, steps=_ALL_STEPS):
    return _CELL.format(T=T, ops=steps)


def _array(data, shape, rng, edges, scale=1.0):
    a = (rng.standard_normal(shape) * scale).astype(np.float32)
    n = data.draw(st.integers(0, edges), label="edges")
    flat = a.reshape(-1)
    for _ in range(n):
        at = data.draw(st.integers(0, flat.size - 1))
        flat[at] = data.draw(st.sampled_from(list(_EDGES)))
    return a


def _cell_args(T, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((T, 4, 8)).astype(np.float32),
            (rng.standard_normal((16, 8)) * 0.3).astype(np.float32), rng.standard_normal(8).astype(np.float32),
            np.zeros((T, 4), np.float32)]


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cells_of_every_opcode_give_the_rules_bits(data, taken, monkeypatch):
    T = _T
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    scale = data.draw(st.sampled_from([1.0, 1e-19, 1e19, 40.0]), label="scale")
    args = [_array(data, (4, 8), rng, 3, scale), _array(data, (T, 4, 8), rng, 6, scale),
            _array(data, (16, 8), rng, 2, 0.3), _array(data, (8,), rng, 1, scale), np.zeros((T, 4), np.float32)]
    fast, plain, generic = _three(_cell_text(T), args, monkeypatch)
    assert fast == plain == generic
    assert taken                                    # (the native loop ran)


# the steps of test_loopgen's random cells the native loop takes (not logistic, rsqrt, sqrt)
_TAKEN_STEPS = [k for k, (tmpl, _) in enumerate(_STEPS) if tmpl.split("(")[0] not in ("logistic", "rsqrt", "sqrt")]


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_cells_give_the_rules_bits(data, taken, monkeypatch):
    """Random bodies (each one compiled: a few examples only) on values with edges."""
    T = 10
    steps = data.draw(st.lists(st.tuples(st.sampled_from(_TAKEN_STEPS), st.integers(0, len(_OTHERS) - 1)),
                               min_size=1, max_size=5), label="steps")
    rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
    args = [_array(data, (4, 8), rng, 3), _array(data, (T, 4, 8), rng, 6), _array(data, (16, 8), rng, 2, 0.3),
            _array(data, (8,), rng, 1), np.zeros((T, 4), np.float32)]
    taken.clear()
    fast, plain, generic = _three(_cell(steps, T), args, monkeypatch)
    assert fast == plain == generic
    assert taken


@pytest.mark.slow
def test_a_cell_runs_natively_to_the_end_and_leaves_its_inputs_alone(taken, monkeypatch):
    T = _T
    args = _cell_args(T, 1)
    keep = [a.copy() for a in args]
    fast, plain, generic = _three(_cell_text(T), args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0] == (T - loopgen.LOOPGEN_AFTER, True)
    for a, k in zip(args, keep):                    # the buffer written in place is the loop's own
        assert a.tobytes() == k.tobytes()


@pytest.mark.slow
def test_a_hazard_runs_its_iteration_again_and_the_native_loop_goes_on(taken, monkeypatch):
    """A subnormal into tanh (its rule keeps it, the processor's DAZ would not) in one iteration:
    that iteration runs through the body's code, the rest natively to the end."""
    T = _T
    args = _cell_args(T, 2)
    args[1][20, 3, 5] = np.float32(1e-40)
    redone = []
    real = native.NativeLoop.run

    def body_runs(self, ec, state, n, limit, name):
        body = self.plan.body
        fn = body.fn

        def counted(ec_, a):
            redone.append(None)
            return fn(ec_, a)
        body.fn = counted
        try:
            return real(self, ec, state, n, limit, name)
        finally:
            body.fn = fn
    monkeypatch.setattr(native.NativeLoop, "run", body_runs)
    fast, plain, generic = _three(_cell_text(T), args, monkeypatch)
    assert fast == plain == generic
    assert len(redone) == 1


@pytest.mark.slow
def test_nan_made_in_the_middle_gives_the_rules_bits(taken, monkeypatch):
    T = _T
    args = _cell_args(T, 2)
    args[1][9, 1, 3] = np.inf
    args[1][9, 2, 3] = -np.inf
    args[1][17, 0, 0] = np.float32(-np.nan)
    fast, plain, generic = _three(_cell_text(T), args, monkeypatch)
    assert fast == plain == generic
    assert taken


@pytest.mark.slow
def test_many_hazards_give_the_loop_back(taken, monkeypatch):
    T = _T
    args = _cell_args(T, 3)
    args[1][:] = np.nan                             # NaN in every iteration: each one runs again
    fast, plain, generic = _three(_cell_text(T), args, monkeypatch)
    assert fast == plain == generic
    assert taken and not taken[0][1] and taken[0][0] == native.GIVE_UP


@pytest.mark.slow
def test_the_iteration_limit_holds_in_the_native_loop(taken, monkeypatch):
    T = _T
    monkeypatch.setenv("HLO_NATIVE", "strict")
    module = parse(_cell_text(T))
    a = bind(module.entry_computation.parameters, _cell_args(T, 4))
    with pytest.raises(HloEvalError, match="ran 23 iterations without its condition 'cond'"):
        run_module(module, a, RunOptions(max_iterations=23))
    assert taken and taken[0] == (23 - loopgen.LOOPGEN_AFTER, False)


@pytest.mark.slow
@pytest.mark.parametrize("it,ct,start,stop", [("s32", "SIGNED", -3, 15), ("u32", "UNSIGNED", 0, 14),
                                              ("s64", "SIGNED", 4294967290, 4294967305)])
def test_clamped_slices_and_updates_give_the_same_bits(it, ct, start, stop, taken, monkeypatch):
    """Start indices below 0 and past the end (unsigned: 0 - 2 wraps to a huge start) clamped as
    the rule clamps them; the accumulator updated in the loop's own buffer, the other (also read)
    not."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((12, 3)).astype(np.float32)]
    fast, plain, generic = _three(_LOOP.format(it=it, ct=ct, start=start, stop=stop), args, monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1]


# ----------------------------------------------------------------------------- what is left alone

def test_an_opcode_it_does_not_take_leaves_the_loop_to_loopgen(taken, monkeypatch):
    text = _cell_text(12, "  v1 = f32[4,8] logistic(v0)\n  hn = f32[4,8] copy(v1)")
    fast, plain, generic = _three(text, _cell_args(12, 6), monkeypatch)
    assert fast == plain == generic
    assert not taken


def test_switched_off_or_short_loops_pay_nothing(taken, monkeypatch):
    """HLO_NATIVE=0, and by default (HLO_NATIVE unset) a loop whose iterations left do not pay for
    numba's import and a compilation: no native loop, nothing compiled."""
    want = _run(_cell_text(40), _cell_args(40, 7), monkeypatch, "0", compiled=False)
    for mode in ("0", ""):
        assert _run(_cell_text(40), _cell_args(40, 7), monkeypatch, mode) == want
    assert not taken


def test_a_surely_short_loop_is_not_even_planned(taken, monkeypatch):
    """By default a loop whose iterations left (at most the distance of its induction variable to
    the condition's constant) times its instructions cannot pay for numba's import and a load:
    no plan generated (a few ms saved), its bound kept for the next time it is asked about."""
    from hlo_cli.interpreter.per_module import cached
    monkeypatch.setenv("HLO_NATIVE", "")
    module = parse(_cell_text(40))
    args = bind(module.entry_computation.parameters, _cell_args(40, 7))
    want = _bits(run_module(module, args, RunOptions(), compiled=False))
    assert _bits(run_module(module, args, RunOptions())) == want and not taken
    assert not cached(module, "native-loops", dict)
    assert [v[0] for v in cached(module, "native-bounds", dict).values()] == [40 - loopgen.LOOPGEN_AFTER + 1]


@pytest.mark.slow
def test_a_loop_run_again_and_again_is_compiled_once_its_iterations_pay(taken, monkeypatch):
    """The default policy sums the iterations a loop was asked about in this process: a loop too
    short to pay once is compiled when, run again, its iterations together pay."""
    from hlo_cli.interpreter.per_module import cached
    monkeypatch.setenv("HLO_NATIVE", "")
    for name in ("IMPORT_COST", "COMPILE_STEP_COST"):
        monkeypatch.setattr(native, name, 0.0)
    monkeypatch.setattr(native, "STEP_COST", 1.0)
    for name in ("COMPILE_COST", "LOAD_COST"):          # (compiled before by another test, or not)
        monkeypatch.setattr(native, name, float("inf"))
    module = parse(_cell_text(_T))
    args = bind(module.entry_computation.parameters, _cell_args(_T, 10))
    want = _bits(run_module(module, args, RunOptions(), compiled=False))
    assert _bits(run_module(module, args, RunOptions())) == want and not taken
    assert not cached(module, "native-loops", dict)     # (surely short: not even planned)
    left = _T - loopgen.LOOPGEN_AFTER
    assert cached(module, "native-bounds", dict) and \
        [v[0] for v in cached(module, "native-bounds", dict).values()] == [left + 1]
    steps = _plan(_cell_text(_T), _cell_args(_T, 10), monkeypatch).steps     # (another module)
    monkeypatch.setenv("HLO_NATIVE", "")
    taken.clear()
    for name in ("COMPILE_COST", "LOAD_COST"):
        monkeypatch.setattr(native, name, 1.5 * left * steps)
    assert _bits(run_module(module, args, RunOptions())) == want
    assert taken == [(_T, True)]                   # (a loop seen before is handed over at once)


def _plan(text, args, monkeypatch):
    """The native plan of the one loop of `text`, after a run that takes it."""
    from hlo_cli.interpreter.per_module import cached
    monkeypatch.setenv("HLO_NATIVE", "strict")
    module = parse(text)
    run_module(module, bind(module.entry_computation.parameters, args), RunOptions())
    (_, _, plan), = cached(module, "native-loops", dict).values()
    return plan


@pytest.mark.slow
def test_the_iterations_left_come_from_the_condition(monkeypatch):
    plan = _plan(_cell_text(_T), _cell_args(_T, 8), monkeypatch)
    state = (np.int32(10),) + tuple(np.zeros(1) for _ in range(6))
    assert plan.iterations_left(state) == 30
    assert plan.iterations_left((np.int32(45),) + state[1:]) == 0


@pytest.mark.slow
def test_no_multiply_add_is_contracted(monkeypatch):
    """Without fastmath numba's LLVM keeps a * b + c two roundings: no FMA in the machine code of
    the cell, whose dot and elementwise steps multiply and add."""
    plan = _plan(_cell_text(_T), _cell_args(_T, 9), monkeypatch)
    asm = "\n".join(plan.fn.inspect_asm().values())
    assert "mulss" in asm or "mulsd" in asm or "mulps" in asm
    assert not any(f in asm for f in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub"))


# ----------------------------------------------------------------------------- what the hazards rest on

def test_libm_exp_and_tanh_sit_within_the_margin_of_numpys():
    """The native loop's exp and tanh are the C library's f64 functions where the rules use
    NumPy's: on a sweep of f32 operands (every 64th bit pattern of the ranges where the f32 result
    is neither 0, 1 nor inf, and random patterns) their f64 results differ by far fewer ulps than
    native.MARGIN, so a result more than MARGIN ulps from a rounding edge rounds alike."""
    import math

    @numba.njit
    def libm(x, which):
        out = np.empty(x.size, np.float64)
        for i in range(x.size):
            v = np.float64(x[i])
            out[i] = math.exp(v) if which == 0 else math.tanh(v)
        return out
    rng = np.random.default_rng(0)
    for which, fn, lo, hi in ((0, np.exp, -104.0, 89.0), (1, np.tanh, -9.1, 9.1)):
        pos = np.arange(np.float32(2.0 ** -60).view(np.int32), np.float32(hi).view(np.int32), 64, dtype=np.int32)
        neg = np.arange(np.float32(2.0 ** -60).view(np.int32), np.float32(-lo).view(np.int32), 64, dtype=np.int32)
        x = np.concatenate([pos.view(np.float32), -neg.view(np.float32),
                            rng.uniform(lo, hi, 1 << 20).astype(np.float32)])
        mine, want = libm(x, which), fn(x.astype(np.float64))
        ulps = np.abs(mine.view(np.int64) - want.view(np.int64))
        assert int(ulps.max()) <= native.MARGIN // 64, (which, int(ulps.max()))


_REDUCTIONS = """HloModule sums
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
mn {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] minimum(a, b)
}}
body {{
  p = (s32[], f32[20,15], f32[7], f32[3,5], f32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[20,15] get-tuple-element(p), index=1
  y = f32[7] get-tuple-element(p), index=2
  z = f32[3,5] get-tuple-element(p), index=3
  acc = f32[] get-tuple-element(p), index=4
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  init = f32[] constant({init})
  sx = f32[] reduce(x, init), dimensions={{0,1}}, to_apply=add
  sy = f32[] reduce(y, init), dimensions={{0}}, to_apply=add
  sz = f32[] reduce(z, init), dimensions={{0,1}}, to_apply=add
  cz = f32[5] reduce(z, init), dimensions={{0}}, to_apply=add
  mz = f32[5] reduce(z, init), dimensions={{0}}, to_apply=mn
  t1 = f32[] add(sx, sy)
  t2 = f32[] add(t1, sz)
  acc1 = f32[] add(acc, t2)
  c = f32[] constant(0.75)
  cb = f32[20,15] broadcast(c), dimensions={{}}
  x1 = f32[20,15] multiply(x, cb)
  cy = f32[7] broadcast(c), dimensions={{}}
  y1 = f32[7] subtract(y, cy)
  cc = f32[5] add(cz, mz)
  ROOT t = (s32[], f32[20,15], f32[7], f32[3,5], f32[], f32[5]) tuple(i1, x1, y1, z, acc1, cc)
}}
cond {{
  p = (s32[], f32[20,15], f32[7], f32[3,5], f32[], f32[5]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(30)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY e {{
  x = f32[20,15] parameter(0)
  y = f32[7] parameter(1)
  z = f32[3,5] parameter(2)
  i0 = s32[] constant(0)
  a0 = f32[] constant(0)
  c0 = f32[5] constant({{0, 0, 0, 0, 0}})
  s0 = (s32[], f32[20,15], f32[7], f32[3,5], f32[], f32[5]) tuple(i0, x, y, z, a0, c0)
  w = (s32[], f32[20,15], f32[7], f32[3,5], f32[], f32[5]) while(s0), condition=cond, body=body
  ROOT r = f32[] get-tuple-element(w), index=4
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("init", ["0", "-0", "2.5"])
def test_sums_to_one_value_follow_numpys_pairwise_order(init, taken, monkeypatch):
    """The rules' f32 add-reduce to a single value is NumPy's reduction: the init plus the pairwise
    sum (under 8 elements, 8 running sums up to 128, halves beyond: 300 elements of [20,15]); to
    several values a fold from the init.  Values of widely spread magnitudes and signs show any other order."""
    rng = np.random.default_rng(11)

    def spread(*shape):
        return (rng.standard_normal(shape) * np.exp2(rng.integers(-12, 12, shape))).astype(np.float32)
    fast, plain, generic = _three(_REDUCTIONS.format(init=init), [spread(20, 15), spread(7), spread(3, 5)],
                                  monkeypatch)
    assert fast == plain == generic
    assert taken and taken[0][1]
