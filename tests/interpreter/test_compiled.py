"""The compiled fast path (hlo_cli/interpreter/compiler.py and the rules' prepare stages) against the generic loop.

The generic loop runs every instruction through its evaluation rule, the reference that the XLA
goldens check; the compiled path must give the same bits: on every golden program and JAX sample,
and on hypothesis-generated f32/integer inputs full of the edge cases the fast paths short-cut
(subnormals in and out, NaN of both signs, infinities, signed zeros, shifts past the width)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import RunOptions, run_module
from hlo_cli.interpreter.inputs import bind
from hlo_cli.interpreter.per_module import module_cache
from hlo_cli.interpreter.values import leaves
from hlo_cli.parser import parse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import ROOT, load_golden, programs  # noqa: E402

SAMPLES = ROOT / "samples" / "jax"


def _bits(values):
    out = []
    for v in values:
        v = np.asarray(v)
        out.append((v.dtype.str, v.shape, np.ascontiguousarray(v).view(np.uint8).tobytes()))
    return out


def _both(module, args, **opts):
    fast = run_module(module, args, RunOptions(**opts))
    slow = run_module(module, args, RunOptions(**opts), compiled=False)
    return list(leaves(fast)) if isinstance(fast, tuple) else [fast], \
        list(leaves(slow)) if isinstance(slow, tuple) else [slow]


@pytest.mark.parametrize("path", programs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_program_bits_match_the_generic_loop(path: Path):
    module = parse(path.read_text(), str(path))
    args, _ = load_golden(path, module)
    args = bind(module.entry_computation.parameters, args)
    fast, slow = _both(module, args)
    assert _bits(fast) == _bits(slow)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.hlo")), ids=lambda p: p.name)
def test_jax_sample_bits_match_the_generic_loop(path: Path):
    module = parse(path.read_text(), str(path))
    inputs = SAMPLES / (path.name.split(".")[0] + ".inputs.npz")
    with np.load(inputs) as z:
        raw = [z[f"arg{k}"] for k in range(len(z.files))]
    args = bind(module.entry_computation.parameters, raw)
    fast, slow = _both(module, args)
    assert _bits(fast) == _bits(slow)
    again, _ = _both(module, args)                 # the cached compiled form, folded constants intact
    assert _bits(again) == _bits(fast)


# ----------------------------------------------------------------------------- edge-case laws

_F32_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 5.9e-39, -5.9e-39, 1.1754944e-38, -1.1754944e-38,
                       2.3509887e-38, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan, -np.nan, 0.5, 3.0],
                      np.float32)
_floats = st.lists(st.one_of(st.sampled_from(list(_F32_EDGES)), st.floats(width=32, allow_nan=True)),
                   min_size=6, max_size=6).map(lambda v: np.array(v, np.float32))

_FLOAT_CHAIN = """
HloModule chain
ENTRY e {{
  a = {t}[6] parameter(0)
  b = {t}[6] parameter(1)
  c = {t}[] constant(1.17549435e-38)
  cb = {t}[6] broadcast(c), dimensions={{}}
  s = {t}[6] add(a, b)
  d = {t}[6] subtract(s, cb)
  m = {t}[6] multiply(d, a)
  q = {t}[6] divide(m, b)
  n = {t}[6] negate(q)
  l = pred[6] compare(n, a), direction=LT
  w = {t}[6] select(l, n, a)
  g = pred[6] compare(a, b), direction=EQ
  h = {t}[6] multiply(w, cb)
  ROOT r = ({t}[6], {t}[6], pred[6], pred[6], {t}[6]) tuple(w, q, l, g, h)
}}
"""


@pytest.mark.parametrize("t", ["f32", "f64"])
@settings(max_examples=60, deadline=None)
@given(a=_floats, b=_floats)
def test_float_fast_paths_flush_and_sign_nans_like_the_rules(t, a, b):
    module = parse(_FLOAT_CHAIN.format(t=t))
    dt = np.float32 if t == "f32" else np.float64
    fast, slow = _both(module, [a.astype(dt), b.astype(dt)])
    assert _bits(fast) == _bits(slow)


_INT_CHAIN = """
HloModule ints
ENTRY e {{
  a = {t}[5] parameter(0)
  b = {t}[5] parameter(1)
  s = {t}[5] add(a, b)
  d = {t}[5] subtract(a, b)
  m = {t}[5] multiply(s, d)
  x = {t}[5] xor(m, b)
  o = {t}[5] or(x, a)
  n = {t}[5] and(o, d)
  v = {t}[5] not(n)
  l = {t}[5] shift-left(v, b)
  r = {t}[5] shift-right-logical(v, b)
  q = {t}[5] shift-right-arithmetic(v, b)
  c = pred[5] compare(l, r), direction=LT
  z = {t}[5] negate(q)
  ROOT t = ({t}[5], {t}[5], {t}[5], pred[5], {t}[5]) tuple(l, r, q, c, z)
}}
"""


@pytest.mark.parametrize("t,dt", [("s8", np.int8), ("u8", np.uint8), ("s32", np.int32), ("u32", np.uint32),
                                  ("s64", np.int64), ("u64", np.uint64)])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_integer_fast_paths_wrap_and_shift_like_the_rules(t, dt, data):
    info = np.iinfo(dt)
    edge = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.bits - 1, info.bits, info.bits + 3]
    ints = st.lists(st.one_of(st.sampled_from(edge), st.integers(int(info.min), int(info.max))),
                    min_size=5, max_size=5)
    a = np.array(data.draw(ints), dt)
    b = np.array(data.draw(ints), dt)
    module = parse(_INT_CHAIN.format(t=t))
    fast, slow = _both(module, [a, b])
    assert _bits(fast) == _bits(slow)


def test_folded_constants_are_read_only_and_shared_between_runs():
    module = parse("""
HloModule fold
ENTRY e {
  p = f32[3] parameter(0)
  c = f32[] constant(2)
  b = f32[3] broadcast(c), dimensions={}
  k = f32[3] multiply(b, b)
  ROOT r = f32[3] add(p, k)
}
""")
    x = np.array([1, 2, 3], np.float32)
    assert run_module(module, [x]).tolist() == [5, 6, 7]
    assert run_module(module, [x + 1]).tolist() == [6, 7, 8]


def test_runtime_errors_name_the_instruction_in_a_called_computation():
    text = """HloModule err

inner {
  a = f32[2] parameter(0)
  ROOT bad = f32[2] custom-call(a), custom_call_target="no_such_target"
}

ENTRY e {
  p = f32[2] parameter(0)
  one = f32[2] add(p, p)
  ROOT c = f32[2] call(one), to_apply=inner
}
"""
    module = parse(text, "err.hlo")
    for compiled in (True, False):
        with pytest.raises(HloEvalError) as exc:
            run_module(module, [np.ones(2, np.float32)], compiled=compiled)
        diag = exc.value.diagnostics[0]
        assert "no_such_target" in str(exc.value)
        assert diag.instruction == "bad" and diag.line == 5, (compiled, diag)


def test_a_value_of_the_wrong_shape_is_caught_on_the_compiled_path():
    # an unchecked module whose add mixes a [1] and a [3] operand: NumPy would broadcast
    module = parse("""HloModule wrong
ENTRY e {
  a = f32[1] parameter(0)
  b = f32[3] parameter(1)
  ROOT s = f32[1] add(a, b)
}
""")
    with pytest.raises(HloEvalError) as exc:
        run_module(module, [np.ones(1, np.float32), np.ones(3, np.float32)])
    assert exc.value.diagnostics[0].instruction == "s"


def test_in_place_results_never_touch_inputs_or_values_still_in_use():
    # s dies at m but r (a view of s) is still alive: s must not be overwritten; d dies at m and
    # is overwritten in place; the parameters are never written
    module = parse("""HloModule inplace
ENTRY e {
  a = u32[2,3] parameter(0)
  b = u32[2,3] parameter(1)
  s = u32[2,3] add(a, b)
  d = u32[2,3] xor(a, b)
  r = u32[3,2] reshape(s)
  m = u32[2,3] multiply(s, d)
  x = u32[2,3] shift-left(m, b)
  ROOT t = (u32[3,2], u32[2,3], u32[2,3]) tuple(r, m, x)
}
""")
    a = np.arange(6, dtype=np.uint32).reshape(2, 3)
    b = np.full((2, 3), 3, np.uint32)
    a0, b0 = a.copy(), b.copy()
    for _ in range(6):                              # past HOT_CALLS: the generated code too
        r, m, x = run_module(module, [a, b])
        assert r.ravel().tolist() == (a0 + b0).ravel().tolist()
        assert m.tolist() == ((a0 + b0) * (a0 ^ b0)).tolist()
        assert x.tolist() == (((a0 + b0) * (a0 ^ b0)) << b0).tolist()
        assert np.array_equal(a, a0) and np.array_equal(b, b0)


_REGION = """
HloModule fused
ENTRY e {{
  a = {t}[{n},{m}] parameter(0)
  b = {t}[{n},{m}] parameter(1)
  s = {t}[{n},{m}] add(a, b)
  c = {t}[] constant(3)
  cb = {t}[{n},{m}] broadcast(c), dimensions={{}}
  p = {t}[{n},{m}] multiply(s, cb)
  d = {t}[{n},{m}] subtract(p, a)
  q = {t}[{n},{m}] multiply(d, d)
  l = pred[{n},{m}] compare(q, s), direction=GT
  w = {t}[{n},{m}] select(l, q, b)
  r = {t}[{m},{n}] transpose(s), dimensions={{1,0}}
  n2 = {t}[{n},{m}] negate(w)
  ROOT t = ({t}[{n},{m}], {t}[{m},{n}], pred[{n},{m}], {t}[{n},{m}]) tuple(n2, r, l, p)
}}
"""


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64), ("s32", np.int32), ("u32", np.uint32)])
@pytest.mark.parametrize("n,m", [(37, 29), (512, 640)])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_regions_match_the_generic_loop(monkeypatch, t, dt, n, m, threads):
    """Runs of elementwise steps run block by block; the small case forces many ragged blocks, the
    large one uses the default block size; with two threads the blocks are shared out.  Values
    used after the run (s, p, l) are kept."""
    from hlo_cli.interpreter import compiler, parallel
    monkeypatch.setattr(parallel, "_threads", threads)
    if n < 100:
        monkeypatch.setattr(compiler, "FUSE_BLOCK", 64)
        monkeypatch.setattr(compiler, "FUSE_BLOCK_THREADED", 64)
        monkeypatch.setattr(compiler, "FUSE_MIN", 256)
    module = parse(_REGION.format(t=t, n=n, m=m))
    comp = compiler.compiled(module, module.entry, True)
    regions = [st for st in comp.steps if st[0] == compiler.REGION]
    assert regions and len(regions[0][1].members) >= 5 and len(regions[0][1].blocks) > 1
    rng = np.random.default_rng(n)
    if dt in (np.float32, np.float64):
        a = rng.standard_normal((n, m)).astype(dt)
        b = rng.standard_normal((n, m)).astype(dt)
        edges = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-310, 3e38, 1e-20], dt)
        a.flat[::97][:edges.size] = edges
        b.flat[5::89][:edges.size] = edges[::-1]
    else:
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, (n, m), dtype=dt, endpoint=True)
        b = rng.integers(info.min, info.max, (n, m), dtype=dt, endpoint=True)
    fast, slow = _both(module, [a, b])
    assert _bits(fast) == _bits(slow)


_TWINS = """HloModule twins

cond_a {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(9)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body_a {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[4] multiply(x, x)
  z = f32[4] add(y, x)
  ROOT t = (s32[], f32[4]) tuple(j, z)
}

cond_b {
  s.1 = (s32[], f32[4]) parameter(0)
  i.1 = s32[] get-tuple-element(s.1), index=0
  n.1 = s32[] constant(9)
  ROOT lt.1 = pred[] compare(i.1, n.1), direction=LT
}

body_b {
  s.1 = (s32[], f32[4]) parameter(0)
  i.1 = s32[] get-tuple-element(s.1), index=0
  x.1 = f32[4] get-tuple-element(s.1), index=1
  one.1 = s32[] constant(1)
  j.1 = s32[] add(i.1, one.1)
  y.1 = f32[4] multiply(x.1, x.1)
  z.1 = f32[4] add(y.1, x.1)
  ROOT t.1 = (s32[], f32[4]) tuple(j.1, z.1)
}

ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  zero = s32[] constant(0)
  a = (s32[], f32[4]) tuple(zero, p)
  b = (s32[], f32[4]) tuple(zero, q)
  wa = (s32[], f32[4]) while(a), condition=cond_a, body=body_a
  wb = (s32[], f32[4]) while(b), condition=cond_b, body=body_b
  ra = f32[4] get-tuple-element(wa), index=1
  rb = f32[4] get-tuple-element(wb), index=1
  ROOT r = (f32[4], f32[4]) tuple(ra, rb)
}
"""


def test_structural_twins_share_compiled_code_but_keep_their_own():
    """XLA's clones (a loop body per random draw) generate the same source: Python compiles it
    once, and each computation still gets a code object of its own naming it (errors in generated
    code are located through the code object of the computation that raised)."""
    from hlo_cli.interpreter import compiler
    module = parse(_TWINS, "twins.hlo")
    args = [np.array([0.5, -1e-3, 2.0, np.nan], np.float32), np.array([1e-20, 0.25, -0.5, 3.0], np.float32)]
    fast, slow = _both(module, args)
    assert _bits(fast) == _bits(slow)
    per = module_cache(module)
    bodies = {c.comp.name: c for key, c in per.items()
              if isinstance(c, compiler.Compiled) and c.comp.name in ("body_a", "body_b")}
    a, b = bodies["body_a"], bodies["body_b"]
    assert a.fn is not None and b.fn is not None
    assert a.code is not b.code and a.code.co_code == b.code.co_code
    assert "body_a" in a.code.co_filename and "body_b" in b.code.co_filename
    assert a.fn.__code__ is a.code and b.fn.__code__ is b.code


def test_preparation_leaves_the_garbage_collector_as_it_found_it():
    import gc
    from hlo_cli.interpreter import compiler
    assert gc.isenabled()
    compiler.compiled(parse(_TWINS), "e", True)
    assert gc.isenabled()
    with pytest.raises(HloEvalError):
        compiler.compiled(parse(_TWINS), "no_such_computation", True)
    assert gc.isenabled()
    gc.disable()
    try:
        compiler.compiled(parse(_TWINS), "e", True)
        assert not gc.isenabled()
    finally:
        gc.enable()


_CLONES = """HloModule clones

add_a {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

add_b {
  x.1 = f32[] parameter(0)
  y.1 = f32[] parameter(1)
  ROOT s.1 = f32[] add(x.1, y.1)
}

max_c {
  x.2 = f32[] parameter(0)
  y.2 = f32[] parameter(1)
  ROOT m.2 = f32[] maximum(x.2, y.2)
}

fa {
  p = f32[3,4] parameter(0)
  k = f32[] constant(0.5)
  kb = f32[3,4] broadcast(k), dimensions={}
  t = f32[3,4] multiply(p, kb)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce(t, z), dimensions={1}, to_apply=add_a
}

fb {
  p.1 = f32[3,4] parameter(0)
  k.1 = f32[] constant(0.5)
  kb.1 = f32[3,4] broadcast(k.1), dimensions={}
  t.1 = f32[3,4] multiply(p.1, kb.1)
  z.1 = f32[] constant(0)
  ROOT r.1 = f32[3] reduce(t.1, z.1), dimensions={1}, to_apply=add_b
}

fc {
  p.2 = f32[3,4] parameter(0)
  k.2 = f32[] constant(0.25)
  kb.2 = f32[3,4] broadcast(k.2), dimensions={}
  t.2 = f32[3,4] multiply(p.2, kb.2)
  z.2 = f32[] constant(0)
  ROOT r.2 = f32[3] reduce(t.2, z.2), dimensions={1}, to_apply=add_a
}

fd {
  p.3 = f32[3,4] parameter(0)
  k.3 = f32[] constant(0.5)
  kb.3 = f32[3,4] broadcast(k.3), dimensions={}
  t.3 = f32[3,4] multiply(p.3, kb.3)
  z.3 = f32[] constant(0)
  ROOT r.3 = f32[3] reduce(t.3, z.3), dimensions={1}, to_apply=max_c
}

ENTRY e {
  p = f32[3,4] parameter(0)
  a = f32[3] fusion(p), kind=kLoop, calls=fa
  b = f32[3] fusion(p), kind=kLoop, calls=fb
  c = f32[3] fusion(p), kind=kLoop, calls=fc
  d = f32[3] fusion(p), kind=kLoop, calls=fd
  ROOT t = (f32[3], f32[3], f32[3], f32[3]) tuple(a, b, c, d)
}
"""


def test_structural_twins_are_prepared_once_on_their_own_instructions():
    """fa and fb differ in names only (their reducers too): one fingerprint, fb takes fa's steps
    with its own instructions in them; fc (another constant) and fd (another reducer) differ."""
    from hlo_cli.interpreter import compiler
    module = parse(_CLONES, "clones.hlo")
    fp = {n: compiler.fingerprint(module, n) for n in ("fa", "fb", "fc", "fd", "add_a", "add_b", "max_c")}
    assert fp["fa"] == fp["fb"] and fp["add_a"] == fp["add_b"]
    assert len({fp["fa"], fp["fc"], fp["fd"]}) == 3 and fp["add_a"] != fp["max_c"]
    x = np.array([[1, -2, 3e-39, np.nan], [0.1, 0.2, 0.3, 0.4], [-0.0, 5, -5, 1e30]], np.float32)
    fast, slow = _both(module, [x])
    assert _bits(fast) == _bits(slow)
    a, b = (compiler.compiled(module, n, True) for n in ("fa", "fb"))
    assert a is not b and b.comp.name == "fb"
    assert [st[0] for st in a.steps] == [st[0] for st in b.steps]
    own = {id(i) for i in b.comp.instructions}
    assert all(id(st[4]) in own for st in b.steps)
    assert all(sa[1] is sb[1] for sa, sb in zip(a.steps, b.steps) if sa[0] == compiler.FOLDED)


def test_an_error_in_a_structural_twin_names_its_own_instruction():
    text = """HloModule twin_err

inner_a {
  a = f32[2] parameter(0)
  ROOT bad = f32[2] custom-call(a), custom_call_target="no_such_target"
}

inner_b {
  a.1 = f32[2] parameter(0)
  ROOT bad.1 = f32[2] custom-call(a.1), custom_call_target="no_such_target"
}

ENTRY e {
  p = f32[2] parameter(0)
  ROOT c = f32[2] call(p), to_apply=inner_b
}
"""
    from hlo_cli.interpreter import compiler
    module = parse(text, "twin_err.hlo")
    first = compiler.compiled(module, "inner_a", True)       # inner_a is prepared first: inner_b is its twin
    assert compiler.compiled(module, "inner_b", True).steps[-1][4].name == "bad.1"
    assert first.steps[-1][4].name == "bad"
    for compiled in (True, False):
        with pytest.raises(HloEvalError) as exc:
            run_module(module, [np.ones(2, np.float32)], compiled=compiled)
        diag = exc.value.diagnostics[0]
        assert diag.instruction == "bad.1" and diag.line == 10, (compiled, diag)


def test_step_loop_skips_folded_and_copied_values_and_still_drops_dead_ones():
    """Tier 1 (the entry computation's step loop) runs only the steps that do work: folded
    constants start in the slots, an inlined call's parameters and no-op broadcasts read the slot
    they copy; results are the generic loop's, and values die after their last use."""
    import gc
    import weakref

    from hlo_cli.interpreter import compiler
    text = """HloModule m

inner {
  a = f32[4]{0} parameter(0)
  b = f32[4]{0} parameter(1)
  c = f32[4]{0} broadcast(b), dimensions={0}
  ROOT s = f32[4]{0} add(a, c)
}

sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT z = f32[] add(x, y)
}

ENTRY e {
  p = f32[4]{0} parameter(0)
  q = f32[1000]{0} parameter(1)
  k = f32[] constant(2)
  kb = f32[4]{0} broadcast(k), dimensions={}
  m = f32[4]{0} multiply(p, kb)
  r = f32[1000]{0} negate(q)
  s = f32[] reduce(r, k), dimensions={0}, to_apply=sum
  c = f32[4]{0} call(m, kb), to_apply=inner
  sb = f32[4]{0} broadcast(s), dimensions={}
  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(c, sb)
}
"""
    module = parse(text, "lean.hlo")
    args = bind(module.entry_computation.parameters, [np.array([1.0, -2.0, 0.5, 3.0], np.float32),
                                                     np.linspace(-1, 1, 1000, dtype=np.float32)])
    fast, slow = _both(module, args)
    assert _bits(fast) == _bits(slow)
    entry = next(c for c in module_cache(module).values()
                 if isinstance(c, compiler.Compiled) and c.comp.is_entry)
    steps, template, root = entry.lean
    kinds = [st[0] for st in entry.steps]
    assert compiler.FOLDED in kinds and compiler.SAME in kinds
    assert all(st[0] not in (compiler.FOLDED,) for st in steps)
    assert all(st[0] != compiler.SAME or st[5] is not None for st in steps)
    assert len(steps) < len(entry.steps)
    # every slot a kept step reads is written by an earlier kept step, a parameter or the template
    written = {slot for _, slot in entry.params} | {j for j, v in enumerate(template) if v is not None}
    for st in steps:
        for sub in (st[1][1] if st[0] == compiler.GROUP else (st,)):
            assert all(j in written for j in sub[2])
            written |= set(sub[3]) if sub[0] == compiler.REGION else {sub[3]}
            assert root not in sub[6]
    # a value no step reads after its last use is not kept alive until the end of the run
    seen = []
    orig = entry.lean

    class Probe(np.ndarray):
        pass
    alive_later = []
    steps = list(steps)
    for n, st in enumerate(steps):
        kind, pay, ops, k, inst, ex, free = st
        if inst.name == "r":
            def tracked(*a, _pay=pay):
                v = _pay(*a).view(Probe)
                seen.append(weakref.ref(v))
                return v
            steps[n] = (kind, tracked, ops, k, inst, None, free)
        elif inst.name == "sb" and kind == compiler.PURE:
            def probe(*a, _pay=pay):
                gc.collect()
                alive_later.append(seen[0]() is not None)
                return _pay(*a)
            steps[n] = (kind, probe, ops, k, inst, ex, free)
    entry.lean = (steps, template, root)
    try:
        run_module(module, args, RunOptions())
    finally:
        entry.lean = orig
    assert seen and alive_later == [False]


def test_step_loop_runs_float_arithmetic_in_groups_like_generated_code():
    """The entry computation's step loop runs runs of f32/f64 arithmetic as generated code does
    (one flag setting, one NaN check; a NaN runs the group again step by step): the float chain
    of the law above is one such group, NaNs of both signs and subnormals give the rules' bits."""
    from hlo_cli.interpreter import compiler
    from hlo_cli.interpreter.fpenv import hardware
    if hardware() is None:
        pytest.skip("no hardware FTZ/DAZ here")
    module = parse(_FLOAT_CHAIN.format(t="f32"))
    a = np.array([np.nan, -np.nan, 1e-45, -5.9e-39, 3.0, -0.0], np.float32)
    b = np.array([1.0, 2.0, -np.nan, 1e-45, np.inf, 0.0], np.float32)
    for x, y in ((a, b), (b, a), (np.abs(a) + 1, np.abs(b) + 1)):
        fast, slow = _both(module, [x, y])
        assert _bits(fast) == _bits(slow)
    entry = next(c for c in module_cache(module).values()
                 if isinstance(c, compiler.Compiled) and c.comp.is_entry)
    groups = [st for st in entry.lean[0] if st[0] == compiler.GROUP]
    assert groups and len(groups[0][1][1]) >= 2
