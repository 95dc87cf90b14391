"""What keeps large dumps fast without changing a result: the lexer's runs of instruction lines, the
checker's shape comparison, the two-core parse's condition."""
from __future__ import annotations

import os
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.checker import verify
from hlo_cli.errors import HloSyntaxError
from hlo_cli.ir.shape import Layout, Shape
from hlo_cli.parser import parallel, parse

import pytest


# ----------------------------------------------------------------------------- INSTR_LINES

def _body(n: int, sep) -> str:
    lines = ["  p = f32[4]{0} parameter(0)"]
    for k in range(n):
        lines.append(f"{'  ' * (k % 3)}a.{k} = f32[4]{{0}} add(p, p), metadata={{op_name=\"x\\ny\"}}")
    lines.append("  ROOT r = f32[4]{0} negate(p)")
    return sep(lines)


@pytest.mark.parametrize("sep", [
    lambda ls: "\n".join(ls),
    lambda ls: "\n\n  \n".join(ls),                                         # blank lines
    lambda ls: "\n".join(l + ("  // c" if k % 4 == 1 else "") for k, l in enumerate(ls)),   # comments break runs
    lambda ls: "\n".join(("/* c */ " if k % 5 == 2 else "") + l for k, l in enumerate(ls)),
    lambda ls: "\r\n".join(ls),
], ids=["plain", "blank", "line-comments", "block-comments", "crlf"])
def test_every_instruction_is_located_at_its_name(sep):
    text = "HloModule m\n\nENTRY e {\n" + _body(12, sep) + "\n}\n"
    m = parse(text, "t.hlo")
    starts = [0] + [mm.end() for mm in re.finditer("\n", text)]
    for inst in m.entry_computation.instructions:
        off = starts[inst.loc.line - 1] + inst.loc.column - 1
        assert re.match(r"(ROOT )?" + re.escape(inst.name) + " =", text[off:]), (inst.name, inst.loc)
    assert [i.name for i in m.entry_computation.instructions] == ["p"] + [f"a.{k}" for k in range(12)] + ["r"]


def test_an_error_inside_a_run_of_lines_is_located_and_worded_as_before():
    text = "HloModule m\n\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  a = f32[4]{0} add(p, p)\n" \
           "  b = f32[4]{0} add(p, p)\n  c = f32[4]{0} add(p, p) /\n  ROOT r = f32[4]{0} negate(p)\n}\n"
    with pytest.raises(HloSyntaxError) as e:
        parse(text, "t.hlo")
    d = e.value.diagnostics[0]
    assert (d.line, d.column) == (7, 27)
    assert d.message == "unexpected character '/': expected an attribute, an instruction, a name, '}', ','"


def test_a_missing_brace_after_a_run_names_an_instruction():
    text = "HloModule m\n\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT a = f32[4]{0} add(p, p)\n"
    with pytest.raises(HloSyntaxError) as e:
        parse(text, "t.hlo")
    assert "INSTR_LINES" not in str(e.value) and "an instruction" in str(e.value)


# ----------------------------------------------------------------------------- shape comparison

_TYPES = st.sampled_from(["f32", "bf16", "s32", "pred"])
_DIMS = st.lists(st.integers(1, 3), max_size=3).map(tuple)


@st.composite
def _arrays(draw):
    dims = draw(_DIMS)
    dyn = tuple(draw(st.lists(st.booleans(), min_size=len(dims), max_size=len(dims))))
    m2m = tuple(draw(st.permutations(range(len(dims))))) if dims else ()
    lay = draw(st.sampled_from([None, Layout(m2m), Layout(m2m, memory_space=1)]))
    return Shape(draw(_TYPES), dims, dyn, lay)


_SHAPES = st.recursive(_arrays(), lambda kids: st.one_of(
    st.lists(kids, max_size=3).map(Shape.tuple_of),
    kids.map(lambda s: Shape("buffer", tuple_shapes=(s,)))), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(_SHAPES, _SHAPES)
def test_compatible_is_equality_without_layouts_and_dynamic_flags(a, b):
    assert verify._compatible(a, b) == (verify._strip(a) == verify._strip(b))
    assert verify._compatible(a, a)


# ----------------------------------------------------------------------------- two-core parse

def test_the_two_core_parse_needs_a_free_core(monkeypatch):
    monkeypatch.delenv("HLO_NO_PARALLEL", raising=False)
    monkeypatch.setattr(parallel, "THREADED_RUNTIMES", ())     # (JAX loaded by other tests: no fork)
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "others_running", lambda: 0)
    fork = "fork" in parallel.multiprocessing.get_all_start_methods()
    assert parallel.usable() is fork
    monkeypatch.setattr(parallel, "others_running", lambda: 1)      # the other core busy now
    assert parallel.usable() is False
    # where the system does not say what runs now: the load average
    monkeypatch.setattr(parallel, "others_running", lambda: None)
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert parallel.usable() is fork
    monkeypatch.setattr(parallel.os, "getloadavg", lambda: (3.0, 3.0, 3.0))      # both cores busy
    assert parallel.usable() is False
    monkeypatch.setattr(parallel, "others_running", lambda: 0)
    monkeypatch.setenv("HLO_NO_PARALLEL", "1")
    assert parallel.usable() is False
    monkeypatch.delenv("HLO_NO_PARALLEL")
    monkeypatch.setattr(parallel, "cores", lambda: 1)
    assert parallel.usable() is False


def test_what_runs_now_is_read_from_the_system():
    """On Linux the tasks runnable now come from /proc/loadavg (this process itself not counted)."""
    got = parallel.others_running()
    if os.path.exists("/proc/loadavg"):
        assert isinstance(got, int) and got >= 0
    else:
        assert got is None
    assert 1 <= parallel.cores() <= (os.cpu_count() or 1)
