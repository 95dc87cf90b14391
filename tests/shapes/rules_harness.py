"""The harness shared by the shape-rule tests of the reduction, linalg, control, collective and
io/rng families: inferring every instruction of a sample, and small one-instruction modules built
from operand shapes, an instruction line and named helper computations."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlo_cli.ir.shape import parse_shape_text
from hlo_cli.parser import parse
from hlo_cli.shapes import RuleContext, ShapeRuleError, infer_shape
from hlo_cli.shapes.registry import computation_shapes, context_for, operand_shapes

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = re.compile(r"^[a-z][a-z0-9-]*: \S.* must .+, got .* for \(.*\)$", re.S)


def context(module, inst, comps) -> RuleContext:
    ctx = context_for(module, inst, comps)
    # XLA's module config: replica_count / num_partitions default to 1
    ctx.replica_count = module.attrs.get("replica_count", 1)
    ctx.num_partitions = module.attrs.get("num_partitions", 1)
    return ctx


def samples(opcodes):
    """The samples that use any of `opcodes`."""
    rx = re.compile(r"(?<![\w.%-])(?:" + "|".join(re.escape(o) for o in opcodes) + r")\(")
    return [p for d in ("ops", "syntax", "jax") for p in sorted((ROOT / "samples" / d).glob("*.hlo"))
            if rx.search(p.read_text(errors="replace"))]


def opcode_of(line: str) -> str:
    return re.search(r"\s([a-z][a-z0-9-]*)\((?:p\d|\))", " " + line).group(1)


def S(text):
    return parse_shape_text(text)


class RuleTests:
    """Checks against one family's helper computations (`comps`: name -> text) and the sample
    instructions XLA itself rejects (`xla_rejects`: "dir/file.hlo:instruction" -> why)."""

    def __init__(self, comps: dict[str, str], xla_rejects: dict[str, str] | None = None):
        self.comps = comps
        self.xla_rejects = xla_rejects or {}

    def check_sample(self, path: Path, opcodes) -> int:
        """Every instruction of `opcodes` (names, or a predicate) infers its declared shape."""
        module = parse(path.read_text(), str(path))
        comps = computation_shapes(module)
        rejects = self.xla_rejects
        checked, problems = 0, []
        for comp in module.computations:
            for inst in comp.instructions:
                if not (opcodes(inst.opcode) if callable(opcodes) else inst.opcode in opcodes):
                    continue
                key = f"{path.parent.name}/{path.name}:{inst.name}"
                try:
                    got = infer_shape(inst.opcode, operand_shapes(comp, inst), inst.attrs,
                                      context(module, inst, comps))
                except ShapeRuleError as e:
                    if key not in rejects:
                        problems.append(f"{key}: {e}")
                    checked += 1
                    continue
                same = got.without_layout() == inst.shape.without_layout()
                if key in rejects and same:
                    problems.append(f"{key}: accepted, but XLA rejects it: {rejects[key]}")
                elif key not in rejects and not same:
                    problems.append(f"{key}: inferred {got.to_str(False)}, declared {inst.shape.to_str(False)}")
                checked += 1
        assert not problems, "\n".join(problems)
        return checked

    def module(self, operands, line, comps=(), header=""):
        params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(operands))
        bodies = "\n\n".join(self.comps[c] for c in comps)
        return f"HloModule t{header}\n\n{bodies}\n\nENTRY main {{\n{params}\n  ROOT r = {line}\n}}\n"

    def infer(self, operands, line, comps=(), header=""):
        module = parse(self.module(operands, line, comps, header))
        entry = module.entry_computation
        root = entry.root_instruction
        return infer_shape(root.opcode, operand_shapes(entry, root), root.attrs,
                           context(module, root, computation_shapes(module)))

    def expect_error(self, fragment, operands, line, comps=(), header=""):
        with pytest.raises(ShapeRuleError) as info:
            self.infer(operands, line, comps, header)
        msg = str(info.value)
        assert fragment in msg, msg
        assert TEMPLATE.match(msg), f"not in the house template: {msg}"
        assert msg.startswith(opcode_of(line) + ":"), msg
