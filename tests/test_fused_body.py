"""The one-pass reading of a computation body (parser/frontend.py `_fast_body`, builder.py
`_build_fused`) must give exactly what the scanner's per-line records and the builder's general
path give: the same IR (values, source locations, printed text, serialized form) or the same
located errors, for every text."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloError
from hlo_cli.ir.module import NO_LOC, Instruction, Loc
from hlo_cli.ir.printer import format_module
from hlo_cli.ir.serial import deserialize_module, serialize_module
from hlo_cli.parser import frontend, parse
from tests.test_fast_scanner import _PLAIN, _module

ROOT = Path(__file__).resolve().parent.parent


def _outcome(text: str, name: str = "t.hlo"):
    try:
        m = parse(text, name)
    except HloError as e:
        return ("error", str(e), [(d.message, d.line, d.column, d.code, d.source_line)
                                  for d in getattr(e, "diagnostics", [])])
    locs = [(c.name, c.loc, c.root_explicit, [(i.name, i.loc, i.operand_shapes) for i in c.instructions])
            for c in m.computations]
    return ("ok", m, deserialize_module(serialize_module(m)), format_module(m), locs)


def _both(text: str, monkeypatch, name: str = "t.hlo"):
    """(the outcome without one-pass bodies, the outcome with them, whether a body was read in one pass)."""
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "fused_regexes", lambda: None)
        general = _outcome(text, name)
    raw = frontend.scan_module(text)
    fused = raw is not None and any(c.fast is not None for c in raw.computations)
    return general, _outcome(text, name), fused


def test_the_line_regex_is_the_grammars_instr_line():
    """The one-pass regex is INSTR_LINE cut in parts with capture groups around them: without the
    groups the parts make INSTR_LINE again, so a line is read in one pass exactly when the lexer
    would make an INSTR_LINE token of it."""
    instr_line = frontend._parser()[0].get_terminal("INSTR_LINE").pattern.to_regexp()
    assert "".join(frontend.fused_pattern(instr_line, grouped=False)) == instr_line
    grouped = frontend.fused_pattern(instr_line)
    assert re.compile("".join(grouped)).groups == 6 + re.compile(instr_line).groups
    assert frontend.fused_regexes() is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_module())
def test_one_pass_and_general_agree(monkeypatch, text):
    general, fused, _ = _both(text, monkeypatch)
    assert fused == general


# an inline computation on a line Lark reads on its own (an operand written with its shape is not in
# INSTR_LINE's form): built on the one-pass path, then undone when a later line sends the body to the
# general path
_INLINE_GENERAL = _PLAIN.replace("all-reduce(a)", "all-reduce(f32[4]{0} a)").replace(
    "to_apply=add", "to_apply={x = f32[] parameter(0) y = f32[] parameter(1) ROOT s = f32[] add(x, y)}")


@pytest.mark.parametrize("text", [
    _PLAIN,
    _PLAIN.replace("  q = f32[4]{0} parameter(1)\n", "  q = f32[4]{0} parameter(1)\n\n   \n"),     # blank lines
    _PLAIN.replace("parameter(1)", "parameter(2)"),                    # a gap in the parameter numbers
    _PLAIN.replace("ROOT t", "ROOT t0 = f32[4]{0} negate(r)\n  ROOT t"),        # two ROOTs
    _PLAIN.replace("negate(r)", "negate(r), sharding={replicated}, metadata={op_name=\"a\nb\"}"),  # two lines
    _PLAIN.replace("  c = s32[2]{0} constant({1, 2})\n", "  c = s32[2]{0} constant({1, 2})\n  c = f32[] constant(1)\n"),
    _PLAIN.replace("add(p, q)", "add(p, q), to_apply=nowhere"),
    _PLAIN.replace("to_apply=add", "to_apply={x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                   " ROOT s = f32[] add(x, y)}"),                     # an inline computation
    _PLAIN.replace("a = f32[4]{0} add(p, q)", "a = f32[4]{0} add(p, %q#0)"),
    _PLAIN.replace("ROOT t = f32[4]{0} negate(r)", "ROOT t = (f32[4]{0}, f32[4]{0}) tuple(r, r)"),
    _PLAIN.replace("ROOT t = f32[4]{0} negate(r)", "ROOT t = f32[4]{0} tuple(r, r)"),
    _PLAIN.replace("a = f32[4]{0}", "f32 = f32[4]{0}").replace("all-reduce(a)", "all-reduce(%f32)"),
    _PLAIN.replace("a = f32[4]{0} add(p, q)", "a= f32[4]{0} add(p, q)"),
    _PLAIN.replace("c = s32[2]{0} constant({1, 2})", "c = s32[2]{0} constant({1, 2, 3})"),
    _PLAIN.replace("add(p, q)", "add(p,\tq)"),
    _INLINE_GENERAL,
    _INLINE_GENERAL.replace("ROOT t = f32[4]{0} negate(r)", "u = f32[4]{0} negate(r)\n  ROOT u = f32[4]{0} negate(r)"),
    _INLINE_GENERAL.replace("ROOT t = f32[4]{0} negate(r)", "tt = (f32[4]{0}) tuple(r)\n  ROOT t = f32[4]{0} negate(%tt#0)"),
], ids=["plain", "blank-lines", "parameter-gap", "two-roots", "two-lines", "duplicate", "unknown-callee", "inline",
        "tuple-access", "tuple", "tuple-not-tuple", "element-type-name", "glued", "bad-literal", "tab",
        "inline-general", "inline-general-then-error", "inline-general-then-general"])
def test_chosen_texts(monkeypatch, text):
    general, fused, _ = _both(text, monkeypatch)
    assert fused == general


def test_plain_bodies_are_read_in_one_pass(monkeypatch):
    """(else the tests above prove nothing about the one-pass reading)"""
    assert _both(_PLAIN, monkeypatch)[2]
    body = frontend.scan_module(_INLINE_GENERAL).computations[-1].fast
    assert body is not None and any(isinstance(x, frontend.RawInstr) for x in body.matches)


def _corpus():
    files = sorted(p for d in ("samples", "tests") for p in (ROOT / d).rglob("*.hlo")
                   if p.stat().st_size < 3_000_000)
    return [str(p.relative_to(ROOT)) for p in files]


@pytest.mark.slow
def test_every_sample_reads_the_same(monkeypatch):
    """Every .hlo of samples/ and tests/ (errors included) gives the same outcome either way."""
    differ = []
    for rel in _corpus():
        text = (ROOT / rel).read_text(errors="replace")
        if not text.strip():
            continue
        general, fused, _ = _both(text, monkeypatch, rel)
        if fused != general:
            differ.append(rel)
    assert differ == []


def test_instruction_init_keeps_the_dataclass_defaults():
    """ir/module.py gives Instruction and Loc a faster __init__: the same fields, the same defaults."""
    from dataclasses import MISSING, fields
    inst = Instruction("a", "add", None)
    for f in fields(Instruction):
        if f.name in ("name", "opcode", "shape"):
            continue
        want = f.default if f.default is not MISSING else f.default_factory()
        assert getattr(inst, f.name) == want, f.name
    assert Instruction("a", "add", None).attrs is not Instruction("b", "add", None).attrs
    assert inst.loc is NO_LOC
    full = Instruction("a", "add", None, ("x",), {"k": 1}, None, 3, Loc("f", 1, 2), (None,))
    assert [getattr(full, f.name) for f in fields(Instruction)] == \
        ["a", "add", None, ("x",), {"k": 1}, None, 3, Loc("f", 1, 2), (None,)]
    assert (Loc("f", 1, 2).file, Loc("f", 1, 2).line, Loc("f", 1, 2).column) == ("f", 1, 2)


# ----------------------------------------------------------------------------- attribute values

def _lark_value(text: str):
    lark, t = frontend._parser()
    outer = t.text
    t.text = text
    try:
        return lark.parse(text, start="attr_value")
    finally:
        t.text = outer


def _deep(v):
    """A value with its types, group texts and depths spelled out (Group compares without them)."""
    from hlo_cli.ir.attributes import Group
    if isinstance(v, Group):
        return ("Group", v.open, v.text, v.depth, tuple(_deep(x) for x in v.items))
    return (type(v).__name__, str(v))


_BOUND = st.integers(0, 10**6).map(str)
_SLICE = st.tuples(_BOUND, _BOUND, st.none() | _BOUND).map(
    lambda b: f"[{b[0]}:{b[1]}" + (f":{b[2]}" if b[2] is not None else "") + "]")
_REF = st.from_regex(r"%[A-Za-z_][\w.\-]{0,12}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_SLICE, min_size=1, max_size=6), st.lists(_REF, min_size=1, max_size=6)))
def test_simple_attribute_groups_read_as_lark_reads_them(parts):
    """Slice lists and name lists are decoded without Lark: the same values, types, texts and depths."""
    text = "{" + ", ".join(parts) + "}"
    fast = frontend.simple_group(text)
    assert fast is not None
    assert _deep(fast) == _deep(_lark_value(text))


@pytest.mark.parametrize("text", ["{[0:1],[2:3]}", "{[-1:2]}", "{ [0:1]}", "{[0:1], %a}", "{}", "{[0]}"])
def test_other_groups_are_left_to_lark(text):
    assert frontend.simple_group(text) is None


@pytest.mark.parametrize("text", ["{%a,%b}", "{a, b}"])
def test_word_lists_in_other_spellings_read_as_lark_reads_them(text):
    """(read as plain groups: tests/test_frontend_cold.py)"""
    assert _deep(frontend.simple_group(text)) == _deep(_lark_value(text))
