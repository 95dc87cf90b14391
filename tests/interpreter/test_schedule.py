"""The evaluator's order of a computation (hlo_cli/interpreter/schedule.py): what runs, in what order,
and that its users (evaluator, memory estimate, hoisting, diff's matching) ask it rather than keep
copies."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import hlo_cli
from hlo_cli.interpreter import run_module, schedule
from hlo_cli.interpreter.schedule import (Plan, free_after, kept_unused, post_order, program_order, reachable,
                                          run_order, text_order)
from hlo_cli.ir import opcodes as oc

MODULE = """HloModule m
ENTRY e {
  a = f32[4] parameter(0)
  unused = f32[4] parameter(1)
  dead = f32[4] negate(a)
  tok = token[] after-all()
  out = token[] outfeed(a, tok)
  b = f32[4] abs(a)
  sqrt = f32[4] sqrt(a)
  c = f32[4] add(b, a), control-predecessors={sqrt}
  ROOT r = f32[4] multiply(c, b)
}
"""


def _names(comp, order):
    return [comp.instructions[k].name for k in order]


def test_run_order_parameters_root_then_kept_side_effects():
    comp = hlo_cli.parse(MODULE).entry_computation
    # every parameter (even one nothing reads) first, then the root's dependencies (operands, then
    # control predecessors), then the outfeed that nothing uses; `dead` never runs
    assert _names(comp, run_order(comp)) == ["a", "unused", "b", "sqrt", "c", "r", "tok", "out"]


def test_program_order_keeps_the_text_order_of_the_same_instructions():
    comp = hlo_cli.parse(MODULE).entry_computation
    order = program_order(comp, run_order(comp))
    assert _names(comp, order) == ["a", "unused", "tok", "out", "b", "sqrt", "c", "r"]
    assert sorted(order) == sorted(run_order(comp))


def test_text_order_has_dead_code_and_every_instruction_after_its_dependencies():
    comp = hlo_cli.parse(MODULE).entry_computation
    order = text_order(comp)
    assert len(order) == len(comp.instructions) and "dead" in [i.name for i in order]
    seen = set()
    for inst in order:
        assert set(schedule.dependencies(inst)) <= seen
        seen.add(inst.name)


def test_reachable_follows_operands_and_control_predecessors():
    comp = hlo_cli.parse(MODULE).entry_computation
    assert reachable(["c"], comp.by_name) == {"c", "b", "a", "sqrt"}
    assert reachable(["nowhere", "b"], comp.by_name) == {"b", "a"}


def test_strict_and_tolerant_walks():
    comp = hlo_cli.parse(MODULE).entry_computation
    insts = comp.instructions
    index = {i.name: k for k, i in enumerate(insts) if i.name != "a"}      # as if `a` were undefined
    with pytest.raises(KeyError):
        post_order(insts, index, [index["r"]])
    assert "a" not in [insts[k].name for k in post_order(insts, index, [index["r"]], strict=False)]


def test_the_plan_frees_each_value_after_its_last_use():
    comp = hlo_cli.parse(MODULE).entry_computation
    plan = Plan(comp)
    names = [i.name for i in plan.insts]
    freed = {names[k]: sorted(names[j] for j in plan.free_after[k]) for k in range(len(names))}
    assert freed["unused"] == ["unused"]          # never read: dropped at once
    assert freed["r"] == ["b", "c"]               # the root's slot is never freed
    assert freed["out"] == ["a", "out", "tok"]
    assert free_after([(), (0,), (0, 1)], 2) == [(), (), (0, 1)]


def test_a_run_follows_the_schedule():
    m = hlo_cli.parse(MODULE)
    x = np.arange(4, dtype=np.float32)
    seen = []
    got = run_module(m, [x, x], hook=lambda ev: seen.append(ev.instruction.name))
    np.testing.assert_array_equal(got, (np.abs(x) + x) * np.abs(x))
    assert seen == _names(m.entry_computation, run_order(m.entry_computation))


@pytest.mark.parametrize("opcode", sorted(oc.OPCODES))
def test_what_runs_unused_is_what_xla_keeps(opcode):
    class Inst:
        attrs = {"custom_call_has_side_effect": True, "constrain_layout": True}
    inst = Inst()
    inst.opcode = opcode
    assert kept_unused(inst) == oc.has_side_effect(inst)


def test_an_unused_rng_runs_after_the_roots_dependencies():
    """XLA keeps an unused rng (a side effect): it runs, after what the root needs, so the values
    the root reads are those of the module without it."""
    text = """HloModule r
ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  unused = f32[8] rng(lo, hi), distribution=rng_uniform
  ROOT r = f32[8] rng(lo, hi), distribution=rng_uniform
}
"""
    without = text.replace("  unused = f32[8] rng(lo, hi), distribution=rng_uniform\n", "")
    seen = []
    got = run_module(hlo_cli.parse(text), [], hook=lambda ev: seen.append(ev.instruction.name))
    assert seen[-2:] == ["r", "unused"]
    assert np.array_equal(got, run_module(hlo_cli.parse(without), []))


def test_the_schedule_is_a_layer_below_the_evaluator():
    """schedule.py imports only the IR, the errors and the interpreter's base modules."""
    src = Path(schedule.__file__).read_text()
    allowed = {"__future__", "typing", "errors", "ir.module", "ir.opcodes", "registry", "values"}
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.ImportFrom):
            name = (node.module or "").lstrip(".")
            assert name in allowed, name


@pytest.mark.parametrize("path", ["interpreter/memory.py", "interpreter/hoist.py", "interpreter/evaluator.py",
                                  "interpreter/computations.py", "devices/spmd.py", "diff/matching.py"])
def test_users_ask_the_schedule_instead_of_walking_themselves(path):
    src = (Path(hlo_cli.__file__).parent / path).read_text()
    assert "from .schedule import" in src or "from ..interpreter.schedule import" in src
    assert "_SIDE_EFFECTS" not in src and "def _topo" not in src
