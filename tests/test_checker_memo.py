"""The checker keeps a shape rule's result per (opcode, operand shapes, declared shape, attributes, device
counts) when the rule read no called computation's shapes (verify._RuleMemo): the findings are the same
as with every rule run afresh, errors included (a rule's error is never kept)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.checker import check_module, verify
from hlo_cli.errors import HloError
from hlo_cli.parser import parse
from hlo_cli.shapes.registry import computation_shapes

ROOT = Path(__file__).resolve().parent.parent


def _findings(text, **kw):
    module = parse(text, "t.hlo")
    return [(d.code, d.message, d.line, d.column, d.severity) for d in check_module(module, text, **kw)]


def _unmemoized(monkeypatch):
    def infer(self, inst, operands, declared, replicas, partitions):
        ctx = verify.RuleContext(inst.opcode, declared, self.comp_shapes, replicas, partitions)
        return verify.infer_shape(inst.opcode, operands, inst.attrs, ctx)
    monkeypatch.setattr(verify._RuleMemo, "infer", infer)


ALIKE = """HloModule m

ENTRY e {
  p = f32[4] parameter(0)
  q = f32[5] parameter(1)
  a = f32[4] negate(p), metadata={op_name="a"}
  b = f32[4] negate(p), metadata={op_name="b"}
  c = f32[4] add(p, q)
  d = f32[4] add(p, q), metadata={op_name="d"}
  e = f32[5] negate(p)
  ROOT t = (f32[4], f32[4], f32[4], f32[4], f32[5]) tuple(a, b, c, d, e)
}
"""


def test_alike_instructions_are_each_reported():
    found = _findings(ALIKE)
    # the two bad adds both reported, each at its own line; the wrong declared shape after two good negates
    assert [(code, line) for code, _, line, _, _ in found] == [("C100", 8), ("C100", 9), ("C101", 10)]
    assert found[0][1].replace("%c", "%d") == found[1][1]


CALLS = """HloModule m

f {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}

g {
  y = f32[4] parameter(0)
  ROOT s = s32[4] convert(y)
}

ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] call(p), to_apply=f
  b = f32[4] call(p), to_apply=g
  ROOT t = (f32[4], f32[4]) tuple(a, b)
}
"""


def test_a_rule_reading_a_computation_is_not_kept(monkeypatch):
    module = parse(CALLS, "t.hlo")
    memo = verify._RuleMemo(computation_shapes(module))
    entry = module.computation_map["e"]
    call = entry.by_name["a"]
    memo.infer(call, [entry.by_name["p"].shape], call.shape, None, None)
    assert memo.results == {}
    neg = module.computation_map["f"].by_name["n"]
    memo.infer(neg, [module.computation_map["f"].by_name["x"].shape], neg.shape, None, None)
    assert len(memo.results) == 1
    found = _findings(CALLS)
    assert [(code, line) for code, _, line, _, _ in found] == [("C101", 16)]
    _unmemoized(monkeypatch)
    assert _findings(CALLS) == found


def _modules():
    for sub in ("invalid", "syntax", "ops"):
        yield from sorted((ROOT / "samples" / sub).glob("*.hlo"))


@pytest.mark.slow
def test_findings_are_those_of_every_rule_run_afresh(monkeypatch):
    texts = []
    for path in _modules():
        try:
            text = path.read_text(encoding="utf-8")
            parse(text, "t.hlo")
        except (HloError, UnicodeDecodeError):
            continue
        texts.append(text)
    assert len(texts) > 100
    memoized = [_findings(t, layout_sensitive=True) for t in texts]
    _unmemoized(monkeypatch)
    assert [_findings(t, layout_sensitive=True) for t in texts] == memoized
