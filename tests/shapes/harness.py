"""The harness shared by the shape-rule tests of the elementwise, shape, tuple and indexing families:
samples to check, inference of every instruction of a sample, and XLA's own verdict on a module
(parsed, converted to StableHLO and compiled for the CPU, which runs XLA's HLO verifier)."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hlo_cli.parser import parse
from hlo_cli.shapes import RULES, ShapeRuleError, infer_shape, shapes_text
from hlo_cli.shapes.registry import computation_shapes, context_for, operand_shapes

ROOT = Path(__file__).resolve().parents[2]

SAMPLES = sorted((p for d in ("ops", "syntax", "jax") for p in (ROOT / "samples" / d).glob("*.hlo")),
                 key=lambda p: (p.parent.name, p.name))


@functools.lru_cache(maxsize=1)
def opcodes_in_samples() -> frozenset[str]:
    """Every opcode some sample uses (parsed once for all the families' tests)."""
    seen: set[str] = set()
    for path in SAMPLES:
        for comp in parse(path.read_text()).computations:
            seen.update(i.opcode for i in comp.instructions)
    return frozenset(seen)


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
