"""The evaluation registry is the one index of an opcode's evaluation (hlo_cli/interpreter/registry.py):
every opcode of the table has exactly one rule, and a rule's prepare stage (its compile-time kernel)
lives in the rule's own ops/ module -- so adding an opcode touches one rule module and the table."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import hlo_cli.interpreter.ops as ops_pkg  # (importing it registers the rules)
from hlo_cli.interpreter import registry
from hlo_cli.interpreter.kernels import Fast, Static
from hlo_cli.ir.opcodes import OPCODES
from hlo_cli.parser import parse


def test_every_opcode_has_one_rule():
    missing = [op for op in OPCODES if registry.rule_for(op) is None]
    assert missing == []
    assert sorted(op for op in registry.EVAL_RULES if op not in OPCODES) == []


def test_a_second_rule_or_prepare_stage_is_refused():
    with pytest.raises(RuntimeError, match="two evaluation rules for add"):
        registry.evaluator("add")(lambda inst, args, ec: None)
    with pytest.raises(RuntimeError, match="two prepare stages for add"):
        registry.prepares("add")(lambda inst, ops, st: None)


def test_every_prepare_stage_sits_beside_its_rule():
    assert registry.PREPARERS, "no prepare stage registered"
    for op, prep in registry.PREPARERS.items():
        assert op in OPCODES, op
        rule = registry.EVAL_RULES[op]
        assert prep.__module__ == rule.__module__, (op, prep.__module__, rule.__module__)
        assert prep.__module__.startswith("hlo_cli.interpreter.ops."), (op, prep.__module__)


def test_rule_modules_do_not_import_the_compiler_or_evaluator():
    """ops/ is below the compiler: kernels that run computations go through the EvalContext."""
    for m in pkgutil.iter_modules(ops_pkg.__path__):
        src = inspect.getsource(importlib.import_module(f"{ops_pkg.__name__}.{m.name}"))
        for upper in ("compiler", "evaluator", "loopgen", "profiling"):
            assert f"from ..{upper} import" not in src and f"from .. import {upper}" not in src, (m.name, upper)


_TEXT = """HloModule m

ENTRY main {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  s = f32[4] add(a, b)
  ROOT t = f32[2,2] reshape(s)
}
"""


def _static(text):
    comp = parse(text).entry_computation
    st = Static(comp)
    for k, inst in enumerate(comp.instructions):
        st.record(k, inst, None)
    return comp, st


def test_prepare_returns_a_kernel_computing_the_rule():
    comp, st = _static(_TEXT)
    add = comp.instructions[2]
    fast = registry.prepare(add, [0, 1], st)
    assert isinstance(fast, Fast) and fast.elementwise and fast.clean
    a, b = np.array([1, 2, 3, 4], np.float32), np.array([0.5, -2, 1e-45, 7], np.float32)
    got, want = fast.fn(a, b), registry.rule_for("add")(add, [a, b], None)
    assert got.tobytes() == want.tobytes()


def test_prepare_declines_unknown_opcodes_and_unusual_attributes():
    comp, st = _static(_TEXT)
    param = comp.instructions[0]
    assert registry.prepare(param, [], st) is None          # no prepare stage: the rule runs
    reshape = comp.instructions[3]
    # an operand index compile time knows nothing of: the stage raises, prepare says None
    assert registry.prepare(reshape, [99], st) is None


def test_folded_opcodes_are_pure_opcodes_of_the_table():
    """Constant folding computes its opcodes at compile time: each must be in the table and have
    no side effect and no use of the run's random state (the table's traits)."""
    from hlo_cli.interpreter.kernels import FOLDABLE
    from hlo_cli.ir.opcodes import READS_RNG, SIDE_EFFECT, with_trait
    assert FOLDABLE <= set(OPCODES)
    assert not FOLDABLE & with_trait(SIDE_EFFECT, READS_RNG)


def test_kernel_capabilities_are_declared_not_ad_hoc_attributes():
    """What a kernel tells the code generators is one typed record (kernels.Capabilities): a misspelt
    capability is an error, and a kernel that declares nothing is only called."""
    import pytest

    from hlo_cli.interpreter.kernels import NOTHING_DECLARED, capabilities, declare, flag_free

    def k(x):
        return x
    assert capabilities(k) is NOTHING_DECLARED
    assert capabilities(flag_free(k)).flag_free
    declare(k, hw_ufunc=abs)
    assert capabilities(k).flag_free and capabilities(k).hw_ufunc is abs     # added, not replaced
    with pytest.raises(TypeError):
        declare(k, hw_ufnc=abs)


def test_every_prepared_kernel_speaks_only_through_capabilities():
    """No prepare stage hangs other attributes on its kernel for the generators to find: a kernel's own
    attributes are at most `capabilities` (plus what Python functions carry)."""
    import numpy as np

    import hlo_cli
    from hlo_cli.interpreter.compiler import compiled

    text = """HloModule m
add_f { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[8,4] parameter(0)
  y = f32[8,4] parameter(1)
  s = f32[8,4] add(x, y)
  m = f32[8,4] maximum(s, y)
  e = f32[8,4] exponential(m)
  t = f32[4,8] transpose(e), dimensions={1,0}
  d = f32[8,8] dot(s, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(d, z), dimensions={1}, to_apply=add_f
}
"""
    m = hlo_cli.parse(text)
    c = compiled(m, m.entry, True)
    found = set()
    for st in c.steps:
        fn = st[1]
        found |= set(getattr(fn, "__dict__", {}) or {})
    assert found <= {"capabilities"}, found
    assert np.asarray(hlo_cli.run(m, np.ones((8, 4), np.float32), np.ones((8, 4), np.float32))).shape == (8,)


def _rules_in_a_fresh_process(code: str) -> list:
    import json
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_rules_load_on_the_first_lookup_all_of_them():
    # importing the interpreter (or its light modules) loads no rule; the first lookup loads them all
    lazy = _rules_in_a_fresh_process(
        "import json, sys\n"
        "import hlo_cli.interpreter, hlo_cli.interpreter.memory\n"
        "from hlo_cli.interpreter import registry\n"
        "before = [m for m in sys.modules if m.startswith('hlo_cli.interpreter.ops')"
        " or m == 'hlo_cli.interpreter.evaluator']\n"
        "first = registry.rule_for('add') is not None\n"
        "print(json.dumps([before, first, sorted(registry.EVAL_RULES), sorted(registry.PREPARERS)]))\n")
    eager = _rules_in_a_fresh_process(
        "import json\n"
        "import hlo_cli.interpreter.ops\n"
        "from hlo_cli.interpreter import registry\n"
        "print(json.dumps([sorted(dict.keys(registry.EVAL_RULES)), sorted(dict.keys(registry.PREPARERS))]))\n")
    before, first, rules, preparers = lazy
    assert before == [] and first
    assert [rules, preparers] == eager
    assert rules == sorted(registry.EVAL_RULES)


@pytest.mark.parametrize("first_read", ["'abs' in registry.EVAL_RULES", "len(registry.EVAL_RULES)",
                                        "sorted(registry.PREPARERS)", "registry.EVAL_RULES.get('abs')",
                                        "list(registry.EVAL_RULES.items())"])
def test_any_first_read_of_the_tables_sees_every_rule(first_read):
    n, total = _rules_in_a_fresh_process(
        "import json\n"
        "from hlo_cli.interpreter import registry\n"
        f"{first_read}\n"
        "n = len(dict.keys(registry.EVAL_RULES))\n"
        "import hlo_cli.interpreter.ops\n"
        "print(json.dumps([n, len(dict.keys(registry.EVAL_RULES))]))\n")
    assert n == total > 100


def test_the_package_gives_the_evaluator_lazily_and_keeps_the_decorator():
    import hlo_cli.interpreter as interp
    import hlo_cli.interpreter.evaluator  # noqa: F401  (the submodule's import must not replace it)
    from hlo_cli.interpreter.evaluator import RunOptions
    assert interp.evaluator is registry.evaluator        # the decorator, not the submodule
    assert interp.RunOptions is RunOptions
    with pytest.raises(AttributeError):
        interp.no_such_name
