"""A text the scanner reads whole never needs Lark: the scanner's regular expressions are the grammar's
terminals as stored in parser/terminal_patterns.py (checked here against Lark's, for this grammar),
its tokens are the front end's own, and attribute values are read without Lark where
`read_attr_value` knows them, as Lark reads them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.ir.attributes import KV, Group, Quoted, Seq
from hlo_cli.parser import frontend
from tests.test_fast_scanner import _outcome
from tests.test_frontend_cold import _HEADERED
from tests.test_fused_body import _lark_value

ROOT = Path(__file__).resolve().parent.parent


def test_the_stored_terminals_are_the_grammars():
    """terminal_patterns.py is what Lark makes of grammar/hlo.lark now (after changing the grammar,
    write frontend.render_terminal_patterns() to it)."""
    stored = (ROOT / "hlo_cli" / "parser" / "terminal_patterns.py").read_text()
    assert stored == frontend.render_terminal_patterns()
    lark = frontend._parser()[0]
    for name in frontend.STORED_TERMINALS:
        assert frontend.terminal_source(name) == lark.get_terminal(name).pattern.to_regexp()


def test_another_grammar_takes_its_terminals_from_lark(monkeypatch):
    monkeypatch.setattr(frontend, "_stored", [])
    monkeypatch.setattr(frontend, "_grammar_sha256", lambda: "not the stored one")
    monkeypatch.setattr(frontend, "_lark_terminal", lambda name: f"<{name} from Lark>")
    assert frontend.terminal_source("SHAPE") == "<SHAPE from Lark>"


_MODULE = _HEADERED.split("ENTRY e {")[0] + """%region.1 (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %s.1 = f32[] add(%x.1, %y.1), metadata={op_name="a" stack_frame_id=1}
}

%region.2 (x.2: f32[], y.2: f32[]) -> f32[] {
  %x.2 = f32[] parameter(0)
  %y.2 = f32[] parameter(1)
  ROOT %s.2 = f32[] add(%x.2, %y.2), metadata={op_name="a" stack_frame_id=1}
}

ENTRY %main (p: f32[2], q: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0), sharding={devices=[2,1]<=[2]}
  %q = f32[2]{0} parameter(1)
  %c = f32[2]{0} constant({1, 2})
  %z = f32[] constant(0)
  %w = f32[2]{0} reduce-window(%p, %z), window={size=2 stride=1 pad=0_1}, to_apply=%region.1
  %r = f32[] reduce(%q, %z), dimensions={0}, to_apply=%region.2
  ROOT %a = f32[2]{0} add(%w, %q), frontend_attributes={k="v"}
}
"""


def test_a_text_the_scanner_reads_never_imports_lark(tmp_path):
    """A cold process checks a module in the common form (a header, sections, templates, attribute
    values of several kinds) without importing Lark, and gets what the Lark path gets."""
    path = tmp_path / "m.hlo"
    path.write_text(_MODULE)
    code = ("import sys\nfrom hlo_cli.parser import parse, frontend\nfrom hlo_cli.parser import parallel\n"
            "parallel.warm_up()\n"
            f"m = parse(open({str(path)!r}).read(), 'm.hlo')\n"
            "print(len(m.computations), [k for k in sys.modules if k == 'lark' or k.startswith('lark.')])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3 []"


def test_the_lark_free_reading_is_the_lark_reading(monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(frontend, "scan_module", lambda t: None)
        mp.setattr(frontend, "read_attr_value", lambda t: None)
        lark = _outcome(_MODULE)
    assert lark[0] == "ok" and _outcome(_MODULE) == lark


# ----------------------------------------------------------------------------- attribute values

def _deep(v):
    if isinstance(v, Group):
        return ("Group", v.open, v.text, v.depth, tuple(_deep(x) for x in v.items))
    if isinstance(v, KV):
        return ("KV", v.key, _deep(v.value))
    if isinstance(v, Seq):
        return ("Seq", tuple(_deep(x) for x in v.items))
    if isinstance(v, Quoted):
        return ("Quoted", str(v), v.raw)
    return (type(v).__name__, repr(v))


def _lark_or_error(text):
    try:
        return _deep(_lark_value(text))
    except Exception as e:       # noqa: BLE001 - any of Lark's errors, a bad shape, nesting
        return ("error", type(e).__name__)


_PIECES = st.sampled_from(["{", "}", "[", "]", "(", ")", ",", ", ", ":", "<=", "<", "=", "->", "T", "T(", "a",
                           "1", "-1", "x-y", "f32", "3x3", "b01f_01io->b01f", "%comp", "size=3", "'x'", "'y z'",
                           '"s"', '"a\\"b"', "f32[2]{0}", "s32[]", "bf16[2,3]{1,0}", "f32[2", "{1,2}", "{}",
                           "{ 3 }", "/* c */", "// c\n", " ", "\n", "devices=", "may-alias", "#sdy.mesh"])


@st.composite
def _value(draw, depth=0):
    """A value made of the grammar's pieces: nested groups most of the time, any soup sometimes."""
    if depth > 3 or draw(st.integers(0, 4)) == 0:
        return "".join(draw(st.lists(_PIECES, max_size=6)))
    open_c, close_c = draw(st.sampled_from([("{", "}"), ("[", "]"), ("(", ")")]))
    items = draw(st.lists(st.one_of(_PIECES, _value(depth + 1)), max_size=5))
    return open_c + "".join(items) + close_c


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_value(), _value().map(lambda v: "{" + v + "}"),
                 st.tuples(_value(), st.sampled_from(["<=", "T", ":", " ", ""]), _value()).map("".join)))
def test_attribute_values_read_as_lark_reads_them(text):
    if not text or text[0] not in "{[":
        text = "{" + text + "}"
    fast = frontend.read_attr_value(text)
    if fast is not None:
        assert _deep(fast) == _lark_or_error(text)


@pytest.mark.parametrize("text", [
    "{size=32x32 stride=32x32}", '{xla_cpu_small_call="true"}', "{ {0}: (0, {}, may-alias), {1}: (1, {}, may-alias)}",
    "{devices=[16,1]<=[16]}", "[1,16]<=[16]", "{devices=[8,2,1]<=[2,8]T(1,0)}", "[8,2]<=[2,8]T(1,0)",
    '{xla.sdy.meshes={mesh = #sdy.mesh<["data"=1, "stage"=1]>}}', "{{replicated}, /*index=1*/{replicated}}",
    "{a=T(1)}", "[1]{0}", "{maximal device=0}", "{'x'=2, 'y'}", "{a=b=c}", "{f32[2]{0}, (f32[], s32[2])}"])
def test_values_of_real_dumps_read_without_lark(text):
    fast = frontend.read_attr_value(text)
    assert fast is not None and _deep(fast) == _lark_or_error(text)


@pytest.mark.parametrize("text", ["{a=<=b}", "{a", "{a]", "{a=}", "{f32[2,]{0}}", "{" * 300 + "}" * 300, "[1] b"])
def test_values_it_does_not_know_are_left_to_lark(text):
    assert frontend.read_attr_value(text) is None
