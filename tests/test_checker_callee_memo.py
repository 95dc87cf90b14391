"""The checker keeps a shape rule's result for instructions that call computations (fusion, reduce,
while...) by the called computations' shapes (checker/verify.py `_RuleMemo.by_callees`): alike
instructions run their rule once, and an instruction whose callee differs gets its own verdict."""
from __future__ import annotations

from hlo_cli.checker import check_module, verify
from hlo_cli.parser import parse

_TEXT = """HloModule m

f1 {
  a = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(a)
}

f2 {
  b = f32[4]{0} parameter(0)
  ROOT m = f32[4]{0} abs(b)
}

f3 {
  c = f32[4]{0} parameter(0)
  ROOT r = f32[2]{0} slice(c), slice={[0:2]}
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  x = f32[4]{0} fusion(p), kind=kLoop, calls=f1
  y = f32[4]{0} fusion(x), kind=kLoop, calls=f2
  ROOT z = f32[4]{0} fusion(y), kind=kLoop, calls=f3
}
"""


def _fusion_rules(monkeypatch, text):
    calls = []
    real = verify.infer_shape

    def counting(opcode, *args, **kwargs):
        if opcode == "fusion":
            calls.append(opcode)
        return real(opcode, *args, **kwargs)
    monkeypatch.setattr(verify, "infer_shape", counting)
    diags = check_module(parse(text, "m.hlo"), text)
    return calls, diags


def test_alike_fusions_run_their_rule_once_and_a_different_callee_is_checked(monkeypatch):
    calls, diags = _fusion_rules(monkeypatch, _TEXT)
    assert len(calls) == 2          # x and y call computations of one signature; z's callee differs
    errors = [(d.code, d.line) for d in diags if d.severity == "error"]
    assert errors == [("C101", 22)]     # z declares f32[4], its computation gives f32[2]


def test_the_verdicts_are_those_of_the_rule_run_every_time(monkeypatch):
    monkeypatch.setattr(verify._RuleMemo, "_callees_key", lambda self, *a: None)
    _, every_time = _fusion_rules(monkeypatch, _TEXT)
    monkeypatch.undo()
    _, kept = _fusion_rules(monkeypatch, _TEXT)
    assert [(d.code, d.line, d.column, d.message) for d in kept] == \
        [(d.code, d.line, d.column, d.message) for d in every_time]
