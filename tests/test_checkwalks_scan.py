"""The checker's fast paths give the findings of the plain walks (checker/scan.py, checker/verify.py).

The fast paths: the walks that look at attributes visit only the instructions whose attributes are
more than metadata (ModuleScan.rich); attribute values of shapeless types are not searched for deep
shapes; the rule memo is looked up inline; declared shapes with well-formed layouts and right
bitcasts are kept by identity; a scheduled computation without control predecessors is checked in
one pass; duplicate names are looked for only when one set of all names is short.  Each module
below is checked twice, as it is and with the fast paths off (every instruction visited, no type
skipped, every rule run afresh), and the findings must be the same, in the same order, with the
same text.  The modules hold findings of every walk: recursion, schedules, duplicate names,
asynchronous pairs, all-reduces, shardings, deep attribute shapes, layouts, bitcasts, signatures.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlo_cli.checker import check_module, scan, verify
from hlo_cli.checker.verify import HEAD, TAIL, check_piece
from hlo_cli.errors import HloError
from hlo_cli.ir.attributes import ComputationRef, Metadata
from hlo_cli.ir.module import Instruction
from hlo_cli.parser import parse
from hlo_cli.shapes import RuleContext, infer_shape
from hlo_cli.topology.sharding import module_devices as sharding_devices

ROOT = Path(__file__).resolve().parent.parent


def _findings(module, text, **kw):
    return [dataclasses.astuple(d) for d in check_module(module, text, **kw)]


@pytest.fixture
def plain(monkeypatch):
    """A context in which the fast paths are off."""
    class Plain:
        def __enter__(self):
            self.mp = pytest.MonkeyPatch()
            made = scan.ModuleScan.__init__

            def every_instruction(self, module):        # the walks visit every instruction
                made(self, module)
                for comp, facts in zip(module.computations, self.facts):
                    facts.rich = facts.marked = list(comp.instructions)
                    facts.preds = [i for i in comp.instructions if i.attrs.get("control-predecessors")]
            self.mp.setattr(scan.ModuleScan, "__init__", every_instruction)
            self.mp.setattr(verify, "_SHAPELESS", frozenset())

            def infer(memo, inst, operands, declared, replicas, partitions):
                ctx = RuleContext(inst.opcode, declared, memo.comp_shapes, replicas, partitions)
                return infer_shape(inst.opcode, operands, inst.attrs, ctx)
            self.mp.setattr(verify._RuleMemo, "infer", infer)
            real = verify._check_schedule
            self.mp.setattr(verify, "_check_schedule", lambda comp, rep, ordered=None: real(comp, rep))
            return self

        def __exit__(self, *exc):
            self.mp.undo()
    return Plain()


def _same(module, text, plain, **kw):
    fast = _findings(module, text, **kw)
    with plain:
        slow = _findings(module, text, **kw)
    assert fast == slow
    return fast


BASE = """HloModule m, is_scheduled=true, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b), metadata={op_name="add"}
}

%fused (p0: f32[4,8]) -> f32[8,4] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %n = f32[4,8]{1,0} negate(%p0), metadata={op_name="n"}
  ROOT %t = f32[8,4]{0,1} transpose(%n), dimensions={1,0}
}

%fused.1 (q0: f32[4,8]) -> f32[8,4] {
  %q0 = f32[4,8]{1,0} parameter(0)
  %m = f32[4,8]{1,0} negate(%q0), metadata={op_name="m"}
  ROOT %u = f32[8,4]{0,1} transpose(%m), dimensions={1,0}
}

%cond (c: (s32[], f32[4,8])) -> pred[] {
  %c = (s32[], f32[4,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %k = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %k), direction=LT
}

%body (w: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %w = (s32[], f32[4,8]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%w), index=0
  %one = s32[] constant(1)
  %j1 = s32[] add(%j, %one)
  %v = f32[4,8]{1,0} get-tuple-element(%w), index=1
  ROOT %r = (s32[], f32[4,8]{1,0}) tuple(%j1, %v)
}

ENTRY %main (x: f32[4,8], y: f32[8]) -> (f32[8,4], f32[8,4], f32[8]) {
  %x = f32[4,8]{1,0} parameter(0), sharding={devices=[2,1]0,1}
  %y = f32[8]{0} parameter(1), metadata={op_name="y"}
  %f = f32[8,4]{0,1} fusion(%x), kind=kLoop, calls=%fused, metadata={op_name="f"}
  %g = f32[8,4]{0,1} fusion(%x), kind=kLoop, calls=%fused.1
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,8]{1,0}) tuple(%zero, %x)
  %loop = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%body
  %ar = f32[8]{0} all-reduce(%y), replica_groups={{0,1}}, to_apply=%add
  %ar2 = f32[8]{0} all-reduce(%ar), replica_groups={{0,1}}, to_apply=%add, constrain_layout=true
  %cs = (f32[8]{0}, f32[8]{0}, u32[]) copy-start(%ar2)
  %cd = f32[8]{0} copy-done(%cs)
  %bc = f32[8]{0} bitcast(%cd)
  %cc = f32[8]{0} custom-call(%bc), custom_call_target="x", operand_layout_constraints={f32[8]{0}}
  %unused = f32[8]{0} negate(%cc), control-predecessors={%bc}
  ROOT %out = (f32[8,4]{0,1}, f32[8,4]{0,1}, f32[8]{0}) tuple(%f, %g, %cc)
}
"""


def _deep(depth: int) -> str:
    return "(" * depth + "f32[]" + ")" * depth


# text edits: each brings findings of one walk or more
EDITS = [
    ("replica_count=2", "replica_count=2"),                                     # as it is
    ("is_scheduled=true, ", ""),                                                 # not scheduled
    ("replica_groups={{0,1}}, to_apply=%add, constrain", "replica_groups={{0,1,2}}, to_apply=%add, constrain"),
    ("constrain_layout=true", "constrain_layout=false"),
    ("sharding={devices=[2,1]0,1}", "sharding={devices=[3,1]0,1,2}"),           # C136
    ("sharding={devices=[2,1]0,1}", "sharding={maximal device=5}"),
    ("%cd = f32[8]{0} copy-done(%cs)", "%cd = f32[8]{0} copy-done(%cs)\n  %cd2 = f32[8]{0} copy-done(%cs)"),
    ("%bc = f32[8]{0} bitcast(%cd)", "%bc = f32[8]{0} bitcast(%x)"),           # C113 / C100
    ("operand_layout_constraints={f32[8]{0}}", "operand_layout_constraints={" + _deep(120) + "}"),   # C126
    ("%m = f32[4,8]{1,0} negate(%q0), metadata={op_name=\"m\"}\n  ROOT %u = f32[8,4]{0,1} transpose(%m)",
     "%n = f32[4,8]{1,0} negate(%q0), metadata={op_name=\"m\"}\n  ROOT %u = f32[8,4]{0,1} transpose(%n)"),  # W203
    ("%k = s32[] constant(3)", "%k = s32[] constant(3)\n  %x = s32[] constant(4)"),   # W203
    ("ROOT %u = f32[8,4]{0,1} transpose(%m)", "ROOT %u = f32[8,4]{1,0} transpose(%m)"),
    ("%p0 = f32[4,8]{1,0} parameter(0)", "%p0 = f32[4,8]{0,0} parameter(0)"),   # C110
    ("%q0 = f32[4,8]{1,0} parameter(0)", "%q0 = f32[4,8]{1,0:T(2,128)} parameter(0)"),
    ("%q0 = f32[4,8]{1,0} parameter(0)", "%q0 = f32[4,8]{1,0:T(0,128)} parameter(0)"),   # C111
    ("%bc = f32[8]{0} bitcast(%cd)", "%bc = f32[8]{0} bitcast(%cd)\n  %b2 = s8[8]{0} bitcast(%cd)\n"
     "  %b3 = s8[8]{0} bitcast(%cd)"),                                          # C113 twice
    ("-> (f32[8,4], f32[8,4], f32[8])", "-> (f32[8,4], f32[4,8], f32[8])"),     # C125
    ("%fused.1 (q0: f32[4,8])", "%fused.1 (q0: f32[8,4])"),                   # W204
    ("%y = f32[8]{0} parameter(1)", "%y = f32[8]{0} parameter(1), frontend_attributes={xla.sdy.sharding=\"#sdy\"}"),
    ("%unused = f32[8]{0} negate(%cc), control-predecessors={%bc}", "%unused = f32[8]{0} negate(%cc)"),
    ("%zero = s32[] constant(0)", "%zero = s32[] constant(0)\n  %wide = s32[" + ",".join(["1"] * 65) +
     "] broadcast(%zero), dimensions={}\n  %wide2 = s32[" + ",".join(["1"] * 65) + "] negate(%wide)"),   # W205
    ("%one = s32[] constant(1)", "%one = s32[] constant(1)\n  %el = f32[8]{0} constant({...})"),   # W200
    ("%one = s32[] constant(1)", "%one = s32[] constant(1)\n  %two = s32[] constant(2)"),   # W201 in a body
]


@pytest.mark.parametrize("old,new", EDITS)
def test_edited_modules_find_what_the_plain_walks_find(old, new, plain):
    text = BASE.replace(old, new, 1)
    assert text != BASE or old == new
    module = parse(text, "m.hlo")           # (every edit keeps the module readable: its findings are the checker's)
    for kw in ({}, {"layout_sensitive": True}, {"warnings": False}, {"replicas": 4, "partitions": 2}):
        _same(module, text, plain, **kw)


def _replace(module, comp_name, instructions):
    comps = tuple(dataclasses.replace(c, instructions=tuple(instructions)) if c.name == comp_name else c
                  for c in module.computations)
    return dataclasses.replace(module, computations=comps)


def test_module_edits_in_the_ir_find_what_the_plain_walks_find(plain):
    """Recursion, values used before their definition and control predecessors after their user
    (which the parser does not let through): made in the IR."""
    module = parse(BASE, "m.hlo")
    found = {}
    body = module.computation_map["body"]
    w, j, one, j1, *rest = body.instructions
    found["schedule"] = _same(_replace(module, "body", (w, j1, j, one, *rest)), BASE, plain)
    main = module.computation_map["main"]
    insts = list(main.instructions)
    k = next(i for i, inst in enumerate(insts) if inst.name == "bc")
    insts[k] = dataclasses.replace(insts[k], attrs={"control-predecessors": ("unused",)})
    found["control"] = _same(_replace(module, "main", insts), BASE, plain)
    add = module.computation_map["add"]
    a, b, s = add.instructions
    loop = dataclasses.replace(s, opcode="call", operands=("a", "b"), attrs={"to_apply": ComputationRef("add")})
    found["recursion"] = _same(_replace(module, "add", (a, b, loop)), BASE, plain)
    dup = dataclasses.replace(one, name="j")
    found["duplicate"] = _same(_replace(module, "body", (w, j, dup, j1, *rest)), BASE, plain)
    meta = dataclasses.replace(one, attrs={"metadata": "not a Metadata"})
    found["metadata"] = _same(_replace(module, "body", (w, j, meta, j1, *rest)), BASE, plain)
    codes = {name: {d[5] for d in f} for name, f in found.items()}
    assert "C124" in codes["schedule"] and "C124" in codes["control"] and "C120" in codes["recursion"]


def test_the_base_module_has_findings_of_several_walks(plain):
    codes = {d[5] for d in _same(parse(BASE, "m.hlo"), BASE, plain)}
    assert {"W201"} <= codes


def test_samples_find_what_the_plain_walks_find(plain):
    files = sorted((ROOT / "samples").rglob("*.hlo"))[::7][:40]
    assert files
    for path in files:
        text = path.read_text()
        if len(text) > 300_000:
            continue
        try:
            module = parse(text, path.name)
        except HloError:
            continue
        _same(module, text, plain)


def test_pieces_find_what_the_plain_walks_find(plain):
    """check_piece runs the same walks on each part."""
    module = parse(BASE, "m.hlo")
    for part in (HEAD, TAIL):
        fast = [dataclasses.astuple(d) for d in check_piece(module, BASE, part).rep.items]
        with plain:
            slow = [dataclasses.astuple(d) for d in check_piece(module, BASE, part).rep.items]
        assert fast == slow


# ---------------------------------------------------------------------------------------- the scan

def test_the_scan_leaves_out_only_instructions_whose_attributes_are_metadata():
    module = parse(BASE, "m.hlo")
    s = scan.ModuleScan(module)
    assert [f.rich for f in s.facts] == [s.rich(c) for c in module.computations]
    for comp in module.computations:
        rich = s.rich(comp)
        assert rich == [i for i in comp.instructions if scan.beyond_metadata(i.attrs)]
        for inst in comp.instructions:
            if inst not in rich:
                assert not inst.attrs or (list(inst.attrs) == ["metadata"] and
                                          type(inst.attrs["metadata"]) is Metadata)
                assert inst.called_computations == ()
        assert s.params(comp) == comp.parameters
        assert s.marked(comp) == [i for i in comp.instructions
                                  if "sharding" in i.attrs or "frontend_attributes" in i.attrs]
        assert s.preds(comp) == [i for i in comp.instructions if i.attrs.get("control-predecessors")]
        assert s.opcodes(comp) == {i.opcode for i in comp.instructions}
        called = [n for i in comp.instructions for n in i.called_computations]
        assert s.graph[comp.name] == list(dict.fromkeys(called))


def test_metadata_of_another_type_is_not_left_out():
    inst = Instruction("a", "negate", None, ("x",), attrs={"metadata": ComputationRef("f")})
    assert scan.beyond_metadata(inst.attrs) and inst.called_computations == ("f",)
    assert not scan.beyond_metadata({}) and not scan.beyond_metadata({"metadata": Metadata("{}")})


def test_module_devices_reads_every_sharding():
    text = BASE.replace("sharding={devices=[2,1]0,1}", "sharding={devices=[1,6]0,1,2,3,4,5}")
    module = parse(text, "m.hlo")
    assert sharding_devices(module) == (2, 6)
    text = text.replace("%y = f32[8]{0} parameter(1)", "%y = f32[8]{0} parameter(1), sharding={maximal device=9}")
    assert sharding_devices(parse(text, "m.hlo")) == (2, 10)


# ------------------------------------------------------------------------------- generated modules

_OPS = ["negate", "abs", "copy", "bitcast"]


@st.composite
def _modules(draw):
    """Small scheduled modules of alike computations, with duplicate names, layouts, metadata and
    control predecessors drawn."""
    n = draw(st.integers(1, 4))
    comps, calls = [], []
    for c in range(n):
        lay = draw(st.sampled_from(["{1,0}", "{0,1}", "{1,0:T(2,128)}"]))
        name = draw(st.sampled_from(["p", "v", "w"]))
        op = draw(st.sampled_from(_OPS))
        meta = draw(st.sampled_from(["", ', metadata={op_name="o"}']))
        shape = draw(st.sampled_from(["f32[2,4]", "f32[4,2]", "s32[2,4]"]))
        comps.append(f"%c{c} (a: f32[2,4]) -> f32[2,4] {{\n  %{name}{c} = f32[2,4]{lay} parameter(0)\n"
                     f"  %r{c} = {shape}{lay} {op}(%{name}{c}){meta}\n"
                     f"  ROOT %o{c} = f32[2,4]{{1,0}} copy(%r{c})\n}}\n")
        calls.append(f"  %k{c} = f32[2,4]{{1,0}} fusion(%x), kind=kLoop, calls=%c{c}")
    sched = draw(st.sampled_from(["", ", is_scheduled=true"]))
    body = "\n".join(calls)
    outs = ", ".join(f"%k{c}" for c in range(n))
    text = (f"HloModule g{sched}\n\n" + "\n".join(comps) +
            f"\nENTRY %e (x: f32[2,4]) -> f32[2,4] {{\n  %x = f32[2,4]{{1,0}} parameter(0)\n{body}\n"
            f"  %t = ({', '.join(['f32[2,4]{1,0}'] * n)}) tuple({outs})\n"
            f"  ROOT %z = f32[2,4]{{1,0}} get-tuple-element(%t), index=0\n}}\n")
    return text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_modules())
def test_generated_modules_find_what_the_plain_walks_find(plain, text):
    try:
        module = parse(text, "g.hlo")
    except HloError:
        return
    _same(module, text, plain)
    _same(module, text, plain, layout_sensitive=True)


def test_the_scan_knows_every_call():
    module = parse(BASE, "m.hlo")
    s = scan.ModuleScan(module)
    calling = [i for c in module.computations for i in c.instructions if i.called_computations]
    assert s.calling == {id(i) for i in calling}
    assert s.entry is module.entry_computation
    assert s.called == {n for i in calling for n in i.called_computations}


@pytest.mark.parametrize("old,new", EDITS)
def test_the_tail_summary_is_the_same_with_the_scan(old, new):
    text = BASE.replace(old, new, 1)
    module = parse(text, "m.hlo")           # (every edit keeps the module readable: its findings are the checker's)
    for warnings in (True, False):
        assert verify.tail_summary(module, warnings, scan.ModuleScan(module)) == verify.tail_summary(module, warnings)


BRANCHES = """HloModule b

%t (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %n = f32[] negate(%a)
}

%f (b: f32[]) -> f32[] {
  %b = f32[] parameter(0)
  ROOT %c = f32[] copy(%b)
}

ENTRY %e (i: s32[], x: f32[]) -> f32[] {
  %i = s32[] parameter(0)
  %x = f32[] parameter(1)
  %k = f32[] conditional(%i, %x, %x), branch_computations={%t, %f}, metadata={op_name="k"}
  ROOT %r = f32[] call(%k), to_apply=%t
}
"""


def test_the_scan_finds_calls_in_tuples_of_computations(plain):
    module = parse(BRANCHES, "b.hlo")
    s = scan.ModuleScan(module)
    assert s.graph["e"] == ["t", "f"] and s.called == {"t", "f"}
    assert s.calling == {id(module.entry_computation.by_name[n]) for n in ("k", "r")}
    _same(module, BRANCHES, plain)


def test_a_wide_shape_alone_is_warned_of(plain):
    """W205 in a computation with nothing else to warn of."""
    ones = ",".join(["1"] * 65)
    text = (f"HloModule w\n\nENTRY %e (x: s32[]) -> s32[] {{\n  %x = s32[] parameter(0)\n"
            f"  %b = s32[{ones}] broadcast(%x), dimensions={{}}\n  ROOT %r = s32[] reshape(%b)\n}}\n")
    found = _same(parse(text, "w.hlo"), text, plain)
    assert [(d[5], d[6]) for d in found] == [("W205", "b")]


def test_an_elided_constant_and_an_endless_loop_alone_are_warned_of(plain):
    text = """HloModule c

%cond (c: f32[8]) -> pred[] {
  %c = f32[8]{0} parameter(0)
  ROOT %t = pred[] constant(true)
}

%body (b: f32[8]) -> f32[8] {
  %b = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%b)
}

ENTRY %e () -> f32[8] {
  %k = f32[8]{0} constant({...})
  ROOT %w = f32[8]{0} while(%k), condition=%cond, body=%body
}
"""
    found = _same(parse(text, "c.hlo"), text, plain)
    assert sorted((d[5], d[6]) for d in found) == [("W200", "k"), ("W202", "w")]
