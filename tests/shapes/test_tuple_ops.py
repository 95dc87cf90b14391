"""Shape rules of tuples, tokens and computation leaves (hlo_cli/shapes/families/tuple_ops.py).

tuple, get-tuple-element, parameter, constant, opt-barrier, domain, after-all and add-dependency:
samples, a table of valid cases, a table of invalid cases, and XLA's verdict on both (through JAX,
skipped without jaxlib).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hlo_cli.ir.opcodes import OPCODES
from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, ShapeRuleError, infer_shape, shapes_text
from hlo_cli.shapes.registry import computation_shapes, context_for, operand_shapes

ROOT = Path(__file__).resolve().parents[2]

OWN = sorted({o for o, s in OPCODES.items() if s.family == "tuple"}
             | {"parameter", "constant", "opt-barrier", "domain", "after-all", "add-dependency"})


# ----------------------------------------------------------------------------- harness

SAMPLES = sorted((p for d in ("ops", "syntax", "jax") for p in (ROOT / "samples" / d).glob("*.hlo")),
                 key=lambda p: (p.parent.name, p.name))
# sample -> why it is not used here
SKIPPED_SAMPLES: dict[str, str] = {}


def _attrs(inst) -> dict:
    attrs = dict(inst.attrs)
    if inst.opcode == "constant":
        attrs["literal"] = inst.literal
    return attrs


def sample_checks(path: Path, opcodes) -> int:
    """Infers every instruction of `opcodes` in a sample and compares with its declared shape.
    Shape-less instructions are inferred in order so that their users can be checked."""
    module = parse(path.read_text(), str(path))
    comp_shapes = computation_shapes(module)
    checked = 0
    for comp in module.computations:
        known = {}
        for inst in comp.instructions:
            ops = [comp.by_name[o].shape or known.get(o) for o in inst.operands]
            ctx = context_for(module, inst, comp_shapes)
            if None in ops:
                known[inst.name] = inst.shape
                continue
            if inst.opcode not in opcodes:
                if inst.shape is None and inst.opcode in RULES:
                    try:
                        known[inst.name] = infer_shape(inst.opcode, ops, _attrs(inst), ctx)
                    except ShapeRuleError:
                        pass
                continue
            try:
                got = infer_shape(inst.opcode, ops, _attrs(inst), ctx)
            except ShapeRuleError as e:
                pytest.fail(f"{path.name}: {inst.name}: {e}")
            if inst.shape is not None:
                assert got.to_str(False) == inst.shape.to_str(False), \
                    f"{path.name}: {inst.name} = {inst.opcode}: inferred {got.to_str(False)}, declared {inst.shape.to_str(False)}"
            known[inst.name] = inst.shape or got
            checked += 1
    return checked


def module_text(result: str, opcode: str, operands, attrs: str = "", pre: str = "", extra=()) -> str:
    """ENTRY main { v_i = <operand i> parameter(k) ...; ROOT r = <result> opcode(v...), attrs }.

    An operand written with parentheses (`token[] after-all()`) is an instruction rather than a
    parameter; it comes after the parameters and the `extra` instruction lines."""
    params, insts, names, k = [], [], [], 0
    for i, s in enumerate(operands):
        if re.search(r"\s[a-z][\w-]*\(", s):
            insts.append(f"  v{i} = {s}")
        else:
            params.append(f"  v{i} = {s} parameter({k})")
            k += 1
        names.append(f"v{i}")
    tail = f", {attrs}" if attrs else ""
    lines = params + [f"  {e}" for e in extra] + insts
    lines.append(f"  ROOT r = {result} {opcode}({', '.join(names)}){tail}")
    return f"HloModule t\n\n{pre}ENTRY main {{\n" + "\n".join(lines) + "\n}\n"


def infer_root(text: str):
    module = parse(text)
    comp = module.entry_computation
    inst = comp.root_instruction
    ops = operand_shapes(comp, inst)
    return ops, infer_shape(inst.opcode, ops, _attrs(inst), context_for(module, inst))


_XLA_SCRIPT = r"""
import json, os, sys
from jaxlib import _hlo
import jax
from jax._src.lib import _jax, xla_client as xc
client = jax.devices("cpu")[0].client
devices = _jax.DeviceList(tuple(jax.devices("cpu")[:1]))
for line in sys.stdin:
    text = json.loads(line)
    try:
        m = _hlo.hlo_module_from_text(text)
        mlir = _jax.mlir.hlo_to_stablehlo(m.as_serialized_hlo_module_proto())
        client.compile_and_load(mlir, devices, xc.CompileOptions())
        verdict = "ok"
    except Exception as e:
        msg = str(e)
        # past the verifier, the CPU backend may lack a kernel (acos, dynamic shapes' PadToStatic)
        if msg.startswith("UNIMPLEMENTED") and "verifier" not in msg:
            verdict = "ok"
        else:
            verdict = "rejected: " + msg[:400]
    print(json.dumps(verdict), flush=True)
"""


def xla_verdicts(texts):
    """XLA's verdict ("ok" or "rejected: ...") on each module; a module that makes XLA abort
    counts as rejected."""
    pytest.importorskip("jaxlib._hlo")
    out = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
    while len(out) < len(texts):
        rest = texts[len(out):]
        proc = subprocess.run([sys.executable, "-c", _XLA_SCRIPT], capture_output=True, text=True,
                              input="".join(json.dumps(t) + "\n" for t in rest), env=env, timeout=900)
        got = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('"')]
        out.extend(got)
        if len(out) < len(texts):
            out.append(f"rejected: XLA aborted (exit code {proc.returncode})")
    return out


@dataclass(frozen=True)
class Case:
    """An instruction `result opcode(operands...), attrs`; for bad cases `fragment` is a piece of
    the expected message; `xla=False` when XLA cannot be asked (see `why`)."""
    id: str
    result: str
    opcode: str
    operands: tuple
    attrs: str = ""
    fragment: str = ""
    pre: str = ""
    extra: tuple = ()
    xla: bool = True
    why: str = ""
    raw: str = ""

    @property
    def text(self) -> str:
        if self.raw:
            return self.raw
        return module_text(self.result, self.opcode, self.operands, self.attrs, self.pre, self.extra)


def C(id, result, opcode, operands, attrs="", fragment="", **kw) -> Case:
    return Case(id, result, opcode, tuple(operands), attrs, fragment, **kw)


def check_bad(case: Case):
    with pytest.raises(ShapeRuleError) as info:
        infer_root(case.text)
    msg = str(info.value)
    module = parse(case.text)
    ops = operand_shapes(module.entry_computation, module.entry_computation.root_instruction)
    assert msg.startswith(f"{case.opcode}: "), msg
    assert " must " in msg and ", got " in msg, msg
    assert msg.endswith(" for " + shapes_text(ops)), msg
    assert case.fragment in msg, msg
    return msg


def check_good(case: Case):
    from hlo_cli.ir.shape import parse_shape_text
    _, got = infer_root(case.text)
    assert got.to_str(False) == parse_shape_text(case.result).to_str(False)


def raw(id, result, opcode, lines, fragment="", **kw) -> Case:
    """A case written as the body of ENTRY main (its last line is the ROOT instruction r)."""
    text = "HloModule t\n\nENTRY main {\n" + "\n".join("  " + l for l in lines[:-1]) + \
        f"\n  ROOT r = {lines[-1]}\n}}\n"
    return Case(id, result, opcode, (), "", fragment, raw=text, **kw)


# ----------------------------------------------------------------------------- coverage

def test_every_opcode_of_the_family_has_a_rule():
    assert not [o for o in OWN if o not in RULES]


def test_every_opcode_of_the_family_is_in_a_table():
    covered = {c.opcode for c in GOOD + BAD}
    assert not [o for o in OWN if o not in covered]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples(path):
    key = f"{path.parent.name}/{path.name}"
    if key in SKIPPED_SAMPLES:
        pytest.skip(SKIPPED_SAMPLES[key])
    sample_checks(path, set(OWN))


def test_samples_cover_every_opcode():
    seen = set()
    for path in SAMPLES:
        if f"{path.parent.name}/{path.name}" in SKIPPED_SAMPLES:
            continue
        for comp in parse(path.read_text()).computations:
            seen.update(i.opcode for i in comp.instructions)
    assert not [o for o in OWN if o not in seen]


# ----------------------------------------------------------------------------- valid cases

NO_TUPLE_CONSTANT = "XLA's StableHLO import has no tuple constants"

GOOD = [
    C("tuple.arrays", "(f32[3], s32[])", "tuple", ["f32[3]", "s32[]"]),
    C("tuple.dynamic", "(f32[<=3])", "tuple", ["f32[<=3]"]),
    raw("tuple.empty", "()", "tuple", ["() tuple()"]),
    raw("tuple.nested_with_token", "((f32[2]), token[])", "tuple",
        ["x = f32[2] parameter(0)", "t = (f32[2]) tuple(x)", "k = token[] after-all()",
         "((f32[2]), token[]) tuple(t, k)"]),
    raw("get-tuple-element.first", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "t = (f32[3], s32[]) tuple(x, y)",
         "f32[3] get-tuple-element(t), index=0"]),
    raw("get-tuple-element.nested", "(s32[], f32[3])", "get-tuple-element",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "i = (s32[], f32[3]) tuple(y, x)",
         "t = (f32[3], (s32[], f32[3])) tuple(x, i)", "(s32[], f32[3]) get-tuple-element(t), index=1"]),
    raw("parameter.array", "f32[2,<=3]", "parameter", ["f32[2,<=3] parameter(0)"]),
    raw("parameter.scalar", "pred[]", "parameter", ["pred[] parameter(0)"]),
    raw("constant.vector", "f32[3]", "constant", ["f32[3] constant({1, 2, 3})"]),
    raw("constant.scalar", "s32[]", "constant", ["s32[] constant(7)"]),
    raw("constant.matrix", "bf16[2,2]", "constant", ["bf16[2,2] constant({ {1, 2}, {3, 4} })"]),
    raw("constant.tuple", "(f32[2], s32[])", "constant", ["(f32[2], s32[]) constant(({1, 2}, 7))"],
        xla=False, why=NO_TUPLE_CONSTANT),
    raw("opt-barrier.tuple", "(f32[3], s32[])", "opt-barrier",
        ["x = f32[3] parameter(0)", "y = s32[] parameter(1)", "t = (f32[3], s32[]) tuple(x, y)",
         "(f32[3], s32[]) opt-barrier(t)"]),
    C("opt-barrier.array", "f32[3]", "opt-barrier", ["f32[3]"]),
    C("domain.sharding", "f32[4]", "domain", ["f32[4]"],
      'domain={kind="sharding", entry={maximal device=0}, exit={replicated}}', xla=False,
      why="XLA's StableHLO import drops domains"),
    raw("after-all.none", "token[]", "after-all", ["token[] after-all()"]),
    raw("after-all.two", "token[]", "after-all",
        ["a = token[] after-all()", "b = token[] after-all()", "token[] after-all(a, b)"]),
    raw("add-dependency.array", "f32[3]", "add-dependency",
        ["x = f32[3] parameter(0)", "k = token[] after-all()", "f32[3] add-dependency(x, k)"]),
    raw("add-dependency.tuple", "(f32[3])", "add-dependency",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "k = token[] after-all()",
         "(f32[3]) add-dependency(t, k)"], xla=False, why="StableHLO's add_dependency takes arrays only"),
]


@pytest.mark.parametrize("case", GOOD, ids=lambda c: c.id)
def test_good(case):
    check_good(case)


# ----------------------------------------------------------------------------- invalid cases

BAD = [
    raw("get-tuple-element.index", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "f32[3] get-tuple-element(t), index=1"],
        fragment="index must be in [0, 1) for a tuple of 1 element, got 1"),
    raw("get-tuple-element.negative", "f32[3]", "get-tuple-element",
        ["x = f32[3] parameter(0)", "t = (f32[3]) tuple(x)", "f32[3] get-tuple-element(t), index=-1"],
        fragment="got -1", xla=False, why="XLA's parser rejects a negative index already"),
    C("get-tuple-element.array", "f32[3]", "get-tuple-element", ["f32[3]"], "index=0",
      fragment="the operand must be a tuple, got f32[3]"),
    raw("get-tuple-element.empty", "f32[3]", "get-tuple-element",
        ["t = () tuple()", "f32[3] get-tuple-element(t), index=0"],
        fragment="index must be in [0, 0) for a tuple of 0 elements, got 0"),
    C("after-all.array", "token[]", "after-all", ["f32[3]"], fragment="operand 0 must be a token, got f32[3]"),
    raw("after-all.second", "token[]", "after-all",
        ["x = f32[3] parameter(0)", "k = token[] after-all()", "token[] after-all(k, x)"],
        fragment="operand 1 must be a token, got f32[3]"),
    C("add-dependency.not_token", "f32[3]", "add-dependency", ["f32[3]", "f32[3]"],
      fragment="operand 1 must be a token, got f32[3]"),
]


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_bad(case):
    check_bad(case)


def test_constant_literal_must_have_the_declared_shape():
    from hlo_cli.ir.literal import parse_literal
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    lit = parse_literal("{1, 2, 3}", parse_shape_text("f32[3]"))
    got = infer_shape("constant", [], {"literal": lit}, RuleContext("constant", parse_shape_text("f32[3]")))
    assert got.to_str(False) == "f32[3]"
    with pytest.raises(ShapeRuleError, match=r"constant: the literal's shape must be the declared shape "
                                             r"f32\[4\], got f32\[3\] for \(\)"):
        infer_shape("constant", [], {"literal": lit}, RuleContext("constant", parse_shape_text("f32[4]")))
    # no declared shape: the literal's
    got = infer_shape("constant", [], {"literal": lit}, RuleContext("constant"))
    assert got.to_str(False) == "f32[3]"


def test_constant_cannot_be_a_token():
    from hlo_cli.ir.shape import parse_shape_text
    from hlo_cli.shapes import RuleContext
    with pytest.raises(ShapeRuleError, match=r"constant: the constant's shape must hold only arrays .*"
                                             r"got token\[\] for \(\)"):
        infer_shape("constant", [], {}, RuleContext("constant", parse_shape_text("token[]")))


def test_parameter_needs_a_declared_shape():
    from hlo_cli.shapes import RuleContext
    with pytest.raises(ShapeRuleError, match=r"parameter: the result shape must be written"):
        infer_shape("parameter", [], {}, RuleContext("parameter"))


# ----------------------------------------------------------------------------- XLA agrees

@pytest.fixture(scope="module")
def xla():
    cases = [c for c in GOOD + BAD if c.xla]
    return dict(zip((c.id for c in cases), xla_verdicts([c.text for c in cases])))


@pytest.mark.parametrize("case", [c for c in GOOD if c.xla], ids=lambda c: c.id)
def test_xla_accepts_good(case, xla):
    assert xla[case.id] == "ok", xla[case.id]


@pytest.mark.parametrize("case", [c for c in BAD if c.xla], ids=lambda c: c.id)
def test_xla_rejects_bad(case, xla):
    assert xla[case.id] != "ok"
