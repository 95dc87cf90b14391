"""Scalar computations applied to whole arrays (reducers, comparators, combiners, map) that call
other computations: `call`, `fusion` (also nested), `conditional`.

The callee must run on the arrays as well (EvalContext.apply), without checking its results
against its scalar declared shape.  XLA CPU itself cannot compile a reducer holding a fusion or a
conditional (it aborts), so those are compared with equivalent programs that XLA runs: the
same computations through `call` (golden tests/programs/reduction/reduce.nested_call.*) or with
`select` in place of the conditional.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import PROGRAMS, assert_same, load_golden  # noqa: E402

from hlo_cli.interpreter import computations as C  # noqa: E402
from hlo_cli.interpreter.evaluator import run_module  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

NESTED = PROGRAMS / "reduction" / "reduce.nested_call.hlo"


def _as_fusions(text: str) -> str:
    """The program with every `call(...), to_apply=X` written as a loop fusion of X."""
    import re
    return re.sub(r"call\(([^)]*)\), to_apply=(\w+)", r"fusion(\1), kind=kLoop, calls=\2", text)


def _leaves(v):
    return list(v) if isinstance(v, tuple) else [v]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "generic"])
@pytest.mark.parametrize("form", ["call", "fusion"])
def test_reducers_calling_computations_match_xla(form, compiled):
    text = NESTED.read_text()
    if form == "fusion":
        text = _as_fusions(text)
        assert "fusion(" in text and "call(" not in text
    module = parse(text)
    args, want = load_golden(NESTED, parse(NESTED.read_text()))
    got = _leaves(run_module(module, args, compiled=compiled))
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, {"exact": True}, f"{form} out{k}")


def test_nested_apply_under_a_hook():
    """With a hook (dumps, --check-finite) the entry runs instruction by instruction; the applied
    computations and their callees still run on whole arrays, and the hook sees entry values."""
    module = parse(_as_fusions(NESTED.read_text()))
    args, want = load_golden(NESTED, parse(NESTED.read_text()))
    seen = []
    got = _leaves(run_module(module, args, hook=lambda ev: seen.append(ev.instruction.name)))
    for g, w in zip(got, want):
        assert_same(g, w, {"exact": True})
    assert "s" in seen and "add_inner" not in seen and "c" not in seen


_COND = """HloModule cond_in_reducer

neg {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}

keep {
  p = f32[] parameter(0)
  ROOT c = f32[] copy(p)
}

twice {
  p = f32[] parameter(0)
  ROOT d = f32[] add(p, p)
}

add_abs {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  z = f32[] constant(0)
  lt = pred[] compare(b, z), direction=LT
BRANCH_PRED
  ROOT s = f32[] add(a, ab)
}

add_indexed {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  f = f32[] floor(b)
  i = s32[] convert(f)
BRANCH_INDEX
  ROOT s = f32[] add(a, v)
}

ENTRY main {
  x = f32[10,4]{1,0} parameter(0)
  zero = f32[] constant(0)
  r1 = f32[4]{0} reduce(x, zero), dimensions={0}, to_apply=add_abs
  r2 = f32[10]{0} reduce(x, zero), dimensions={1}, to_apply=add_indexed
  ROOT t = (f32[4]{0}, f32[10]{0}) tuple(r1, r2)
}
"""

_WITH_CONDITIONALS = _COND.replace(
    "BRANCH_PRED", "  ab = f32[] conditional(lt, b, b), true_computation=neg, false_computation=keep").replace(
    "BRANCH_INDEX", "  v = f32[] conditional(i, b, b, b), branch_computations={neg, keep, twice}")
# the same with selects: an index < 0 or > 2 takes the last branch, as XLA defines it
_WITH_SELECTS = _COND.replace("BRANCH_PRED", "  nb = f32[] negate(b)\n  ab = f32[] select(lt, nb, b)").replace(
    "BRANCH_INDEX", """  nb = f32[] negate(b)
  db = f32[] add(b, b)
  c0 = s32[] constant(0)
  c1 = s32[] constant(1)
  is0 = pred[] compare(i, c0), direction=EQ
  is1 = pred[] compare(i, c1), direction=EQ
  other = f32[] select(is1, b, db)
  v = f32[] select(is0, nb, other)""")


def _cond_inputs():
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((10, 4)) * 2).astype(np.float32)]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "generic"])
def test_conditional_in_a_reducer_takes_each_elements_branch(compiled):
    args = _cond_inputs()
    got = _leaves(run_module(parse(_WITH_CONDITIONALS), args, compiled=compiled))
    want = _leaves(run_module(parse(_WITH_SELECTS), args, compiled=compiled))
    for g, w in zip(got, want):
        assert_same(g, w, {"exact": True})
    x = args[0]
    np.testing.assert_allclose(got[0], np.abs(x).sum(axis=0), rtol=1e-6)


def test_conditional_equivalent_matches_xla():
    """The select form the conditional test compares with is what XLA computes."""
    pytest.importorskip("jaxlib._hlo")
    from hlo_cli.tools.xla_reference import run_with_xla
    args = _cond_inputs()
    want = run_with_xla(_WITH_SELECTS, args)
    got = _leaves(run_module(parse(_WITH_SELECTS), args))
    for g, w in zip(got, want):
        assert_same(g, w, {"exact": True})


_MAP = """HloModule map_call

inner {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  p = f32[] multiply(x, y)
  ROOT s = f32[] add(p, x)
}

outer {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] CALL
}

ENTRY main {
  x = f32[3,5]{1,0} parameter(0)
  y = f32[3,5]{1,0} parameter(1)
  ROOT m = f32[3,5]{1,0} map(x, y), dimensions={0,1}, to_apply=outer
}
"""


@pytest.mark.parametrize("call", ["call(a, b), to_apply=inner", "fusion(a, b), kind=kLoop, calls=inner"])
def test_map_calling_a_computation(call):
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    got = run_module(parse(_MAP.replace("CALL", call)), [x, y])
    # XLA CPU inlines the call and the map (CallInliner, MapInliner) into one loop fusion, where the
    # multiply feeding the add is contracted into one FMA (SEMANTICS.md, "FMA contraction"): the
    # product is exact in f64, the sum rounded once (no f32 midpoint among these values)
    want = (x.astype(np.float64) * y + x).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_fusion_keys_are_recognized_and_impure_ones_are_not():
    """A comparator comparing fusions of its operands (TensorFlow's total-order float compare)
    is a key comparator sorted by NumPy; a key that calls something impure (rng) is not."""
    path = PROGRAMS / "reduction" / "sort.fusion_key.hlo"
    module = parse(path.read_text())
    keys = C.comparator_keys(module, "by_key", 2)
    assert keys is not None and [(k.operand, k.root, k.descending) for k in keys] == [(0, "kl", False)]
    impure = path.read_text().replace(
        "  ROOT key = s32[] select(neg, flipped, bits)",
        "  r = s32[] rng(zero, mask), distribution=rng_uniform\n"
        "  ROOT key = s32[] select(neg, flipped, r)")
    assert C.comparator_keys(parse(impure), "by_key", 2) is None
