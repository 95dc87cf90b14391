"""The one code generator's shared parts (hlo_cli/interpreter/codegen.py): blocks and flag
settings written around lines, one step's code (value, check, frees, fallback), and the line table
that names the step an error came from.  The three modes are tested through what they run:
test_compiled.py (computations, regions) and test_loopgen.py (whole loops)."""
from __future__ import annotations

import numpy as np
import pytest

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter.codegen import Source, raising_line
from hlo_cli.interpreter.kernels import ELEMENT, FOLDED, PURE, SAME, TUPLE
from hlo_cli.interpreter.steps import Step
from hlo_cli.parser import parse

_TEXT = """HloModule m
ENTRY e {
  p = f32[3] parameter(0)
  a = f32[3] add(p, p)
  ROOT n = f32[3] negate(a)
}
"""


def _insts():
    comp = parse(_TEXT, "m.hlo").entry_computation
    return {i.name: i for i in comp.instructions}


def _recording_flags(src):
    """Flag setters that record what the code sets, in place of the processor's."""
    seen = []
    src.bind("_fset", seen.append)
    src.bind("_on", "on")
    src.bind("_off", "off")
    return seen


def test_blocks_indent_and_flags_are_restored_when_the_code_raises():
    src = Source("def f(x):")
    seen = _recording_flags(src)
    with src.flags():
        with src.block("if x:"):
            src.line("raise ValueError(x)")
        src.line("y = 1")
    src.line("return y")
    assert src.text.splitlines() == ["def f(x):", "    _fset(_on)", "    try:", "        if x:",
                                     "            raise ValueError(x)", "        y = 1", "    finally:",
                                     "        _fset(_off)", "    return y"]
    fn = src.function("f", "<hlo test f>")
    assert fn(0) == 1 and seen == ["on", "off"]
    with pytest.raises(ValueError):
        fn(1)
    assert seen == ["on", "off", "on", "off"]


def test_each_step_kind_is_written_and_the_raising_line_names_its_step():
    insts = _insts()
    add, neg = insts["a"], insts["n"]
    src = Source("def run(v0):")
    steps = [Step(FOLDED, np.float32(2), (), 1, add, None, ()),
             Step(PURE, np.multiply, (0, 1), 2, add, (np.dtype(np.float32), (3,)), ()),
             Step(TUPLE, None, (2, 0), 3, add, None, ()),
             Step(ELEMENT, 0, (3,), 4, add, None, ()),
             Step(SAME, None, (4,), 5, add, None, (2, 3, 4)),
             Step(PURE, lambda v: v[10], (5,), 6, neg, None, ())]
    for st in steps:
        src.step(st, f"v{st.slot}", [f"v{j}" for j in st.operands], str(st.slot),
                 frees=[f"v{j}" for j in st.frees], at=st.slot)
    src.line("return v6")
    fn = src.function("run", "<hlo test run>")
    with pytest.raises(IndexError) as exc:
        fn(np.ones(3, np.float32))
    assert raising_line(exc.value.__traceback__, fn.__code__, src.at) == 6
    assert "del v2, v3, v4" in src.text and "v3 = (v2, v0,)" in src.text and "v4 = v3[0]" in src.text


@pytest.mark.parametrize("expect, value", [((np.dtype(np.float32), (3,)), np.ones(3, np.float64)),
                                           ((np.dtype(np.float32), (3,)), np.ones(4, np.float32)),
                                           (np.dtype(np.float32), np.ones(3, np.int32))])
def test_a_result_that_does_not_match_its_check_names_the_instruction(expect, value):
    inst = _insts()["a"]
    src = Source("def f(v):")
    src.check("v", expect, inst, "0")
    src.line("return v")
    fn = src.function("f", "<hlo test check>")
    assert fn(np.ones(3, np.float32)).shape == (3,)
    with pytest.raises(HloEvalError, match="^a: add produced a value that does not match its shape"):
        fn(value)


def test_fallback_runs_the_kernel_with_the_flags_clear_only_when_the_written_out_form_fails():
    inst = _insts()["n"]
    calls = []

    def kernel(v):
        calls.append(v)
        return -v
    src = Source("def f(v):")
    seen = _recording_flags(src)
    src.line("r = v")
    src.fallback("r < 0", Step(PURE, kernel, (0,), 1, inst, None, ()), "r", ["v"], "_r")
    src.line("return r")
    fn = src.function("f", "<hlo test fallback>")
    assert fn(3) == 3 and calls == [] and seen == []
    assert fn(-3) == 3 and calls == [-3] and seen == ["off", "on"]
